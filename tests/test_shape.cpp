// Shape (kiln/core/shape.h): a list of dimensions held inline up to
// kInlineRank and on the heap past it, used as the std::vector<int64_t> it
// replaced; and PoolAllocator (kiln/core/pooled.h), whose blocks may be
// freed on another thread than the one that took them.
#include <gtest/gtest.h>

#include <map>
#include <thread>

#include "kiln/core/pooled.h"
#include "kiln/core/shape.h"
#include "kiln/core/tensor.h"

namespace kiln {
namespace {

TEST(Shape, ActsAsTheVectorItReplacedInlineAndOnTheHeap) {
  for (size_t rank : {size_t(0), size_t(3), Shape::kInlineRank, Shape::kInlineRank + 1, size_t(20)}) {
    SCOPED_TRACE(rank);
    std::vector<int64_t> want;
    Shape s;
    for (size_t i = 0; i < rank; ++i) {
      want.push_back(int64_t(i) * 7 - 3);
      s.push_back(int64_t(i) * 7 - 3);
    }
    EXPECT_EQ(std::vector<int64_t>(s), want);
    EXPECT_EQ(s, Shape(want));
    EXPECT_EQ(s.size(), rank);
    EXPECT_GE(s.capacity(), rank);
    Shape copied = s, assigned;
    assigned = s;
    EXPECT_EQ(copied, s);
    EXPECT_EQ(assigned, s);
    Shape moved = std::move(copied);
    EXPECT_EQ(moved, s);
    EXPECT_TRUE(copied.empty());  // NOLINT: a moved-from shape is empty
    // insert and erase anywhere, as std::vector does.
    const size_t at = rank / 2;
    s.insert(s.begin() + long(at), 42);
    want.insert(want.begin() + long(at), 42);
    s.insert(s.end(), {8, 9});
    want.insert(want.end(), {8, 9});
    EXPECT_EQ(std::vector<int64_t>(s), want);
    s.erase(s.begin() + long(at));
    want.erase(want.begin() + long(at));
    s.erase(s.begin(), s.begin() + 1);
    want.erase(want.begin(), want.begin() + 1);
    EXPECT_EQ(std::vector<int64_t>(s), want);
    s.resize(rank + 3, 5);
    want.resize(rank + 3, 5);
    EXPECT_EQ(std::vector<int64_t>(s), want);
    EXPECT_EQ(std::vector<int64_t>(s.rbegin(), s.rend()), std::vector<int64_t>(want.rbegin(), want.rend()));
  }
  EXPECT_THROW(Shape({1, 2}).at(2), Error);
  EXPECT_EQ(Shape(3, 1), (Shape{1, 1, 1}));
  EXPECT_LT((Shape{1, 2}), (Shape{1, 3}));
  EXPECT_LT((Shape{1, 2}), (Shape{1, 2, 0}));
  std::map<Shape, int> by_shape = {{{2, 3}, 1}, {{2}, 2}};
  EXPECT_EQ(by_shape.at({2, 3}), 1);
  EXPECT_EQ(shape_str(Shape{2, 3, 4}), "[2, 3, 4]");
}

// Tensors past the inline rank: views and contiguous copies of rank 8.
TEST(Shape, TensorsOfHighRankViewAndCopy) {
  const Shape shape = {2, 1, 3, 1, 2, 1, 2, 1};
  std::vector<float> values(24);
  for (size_t i = 0; i < values.size(); ++i) values[i] = float(i);
  const Tensor t = Tensor::from_vector(values, shape);
  EXPECT_EQ(t.shape(), shape);
  EXPECT_EQ(t.strides(), (Strides{12, 12, 4, 4, 2, 2, 1, 1}));
  const Tensor swapped = t.transpose(0, 6).contiguous();
  EXPECT_EQ(swapped.shape(), (Shape{2, 1, 3, 1, 2, 1, 2, 1}));
  EXPECT_EQ(swapped.to_vector<float>()[1], 12.0f);  // its [0, .., 0, 1, 0] is t[1, 0, .., 0]
}

struct Block {
  int64_t payload[8];
};

// A block taken on one thread and freed on another goes to the freeing
// thread's list (and back to the system when that thread ends).
TEST(PoolAllocator, BlocksFreedOnAnotherThreadAreTakenThere) {
  auto made = std::allocate_shared<Block>(PoolAllocator<Block>());
  made->payload[0] = 7;
  std::shared_ptr<Block> again;
  std::thread([&] {
    made.reset();  // freed here, into this thread's list
    again = std::allocate_shared<Block>(PoolAllocator<Block>());
    again->payload[0] = 9;
  }).join();
  EXPECT_EQ(again->payload[0], 9);
  again.reset();  // freed on the main thread, after the other thread's list is gone
  auto last = std::allocate_shared<Block>(PoolAllocator<Block>());
  last->payload[0] = 1;
  EXPECT_EQ(last->payload[0], 1);
}

}  // namespace
}  // namespace kiln
