// Kiln's C++ layers, the GPT, the optimizers and the grad mode for Python.
// kiln.nn wraps the layers in PyTorch-shaped Python modules.
#include "kiln/autograd/grad_mode.h"
#include "kiln/backend/backend.h"
#include "kiln/nn/layers.h"
#include "kiln/optim/optimizer.h"
#include "models/gpt/gpt.h"
#include "python/src/bindings.h"

namespace kiln::python {
namespace {

using ModulePtr = std::shared_ptr<nn::Module>;

// The parameters a Python optimizer is given, named by position (the names
// only key the optimizer's state).
nn::NamedTensors numbered(const std::vector<Tensor>& params) {
  if (params.empty()) throw py::value_error("the optimizer got an empty parameter list");
  nn::NamedTensors named;
  for (size_t i = 0; i < params.size(); ++i) {
    if (!params[i].requires_grad())
      throw py::value_error("parameter " + std::to_string(i) + " (" + params[i].str() + ") does not require "
                            "gradients: the optimizer would never move it");
    named.emplace_back(std::to_string(i), params[i]);
  }
  return named;
}

// `with kiln.no_grad():` holds one of these between __enter__ and __exit__.
struct NoGrad {
  std::unique_ptr<NoGradGuard> guard;
};

}  // namespace

void bind_nn(py::module_& m) {
  py::class_<nn::Module, ModulePtr>(m, "_Module")
      .def("forward", [](nn::Module& self, const Tensor& x) {
        py::gil_scoped_release release;
        return self.forward(x);
      })
      .def("named_parameters", &nn::Module::named_parameters)
      .def("train", &nn::Module::train, py::arg("mode") = true)
      .def("to", [](nn::Module& self, const Device& d) { self.to(d); })
      .def("to", [](nn::Module& self, DType d) { self.to(d); })
      .def("load_parameters", [](nn::Module& self, const nn::NamedTensors& t) { self.load_parameters(t); });
  py::class_<nn::WeightModule, nn::Module, std::shared_ptr<nn::WeightModule>>(m, "_WeightModule")
      .def_readonly("weight", &nn::WeightModule::weight);
  py::class_<nn::Linear, nn::WeightModule, std::shared_ptr<nn::Linear>>(m, "_Linear")
      .def(py::init([](int64_t in, int64_t out, bool bias) {
        return std::make_shared<nn::Linear>(in, out, default_generator(), bias);
      }))
      .def_property_readonly("bias", [](const nn::Linear& l) -> py::object {
        return l.bias.defined() ? py::cast(l.bias) : py::none();
      });
  py::class_<nn::Embedding, nn::WeightModule, std::shared_ptr<nn::Embedding>>(m, "_Embedding")
      .def(py::init([](int64_t num, int64_t dim) { return std::make_shared<nn::Embedding>(num, dim, default_generator()); }));
  py::class_<nn::LayerNorm, nn::Module, std::shared_ptr<nn::LayerNorm>>(m, "_LayerNorm")
      .def(py::init<int64_t, double>())
      .def_readonly("weight", &nn::LayerNorm::weight)
      .def_readonly("bias", &nn::LayerNorm::bias);
  py::class_<nn::Conv2d, nn::Module, std::shared_ptr<nn::Conv2d>>(m, "_Conv2d")
      .def(py::init([](int64_t in, int64_t out, int64_t kernel, int64_t stride, int64_t padding, bool bias) {
        return std::make_shared<nn::Conv2d>(in, out, kernel, default_generator(), stride, padding, bias);
      }))
      .def_readonly("weight", &nn::Conv2d::weight)
      .def_property_readonly("bias", [](const nn::Conv2d& c) -> py::object {
        return c.bias.defined() ? py::cast(c.bias) : py::none();
      });

  py::class_<models::GptConfig>(m, "GPTConfig")
      .def(py::init([](int64_t vocab_size, int64_t block_size, int64_t n_layer, int64_t n_head, int64_t n_embd,
                       double dropout) {
             models::GptConfig c;
             c.vocab_size = vocab_size, c.block_size = block_size, c.n_layer = n_layer, c.n_head = n_head;
             c.n_embd = n_embd, c.dropout = dropout;
             return c;
           }),
           py::arg("vocab_size") = 50257, py::arg("block_size") = 1024, py::arg("n_layer") = 12,
           py::arg("n_head") = 12, py::arg("n_embd") = 768, py::arg("dropout") = 0.0)
      .def_readonly("vocab_size", &models::GptConfig::vocab_size)
      .def_readonly("block_size", &models::GptConfig::block_size)
      .def_readonly("n_layer", &models::GptConfig::n_layer)
      .def_readonly("n_head", &models::GptConfig::n_head)
      .def_readonly("n_embd", &models::GptConfig::n_embd)
      .def_readonly("dropout", &models::GptConfig::dropout);
  py::class_<models::Gpt, nn::Module, std::shared_ptr<models::Gpt>>(m, "_GPT")
      .def(py::init([](const models::GptConfig& c) {
        return std::make_shared<models::Gpt>(c, default_generator(), std::make_shared<Generator>(default_generator().seed() ^ 0xD0D0D0D0ull));
      }))
      .def_property_readonly("config", &models::Gpt::config)
      .def("loss", [](models::Gpt& g, const Tensor& ids, const Tensor& targets) {
        py::gil_scoped_release release;
        return g.loss(ids, targets);
      })
      .def("generate", [](models::Gpt& g, std::vector<int32_t> prompt, int64_t max_new_tokens, double temperature,
                          int64_t top_k, double top_p, uint64_t seed) {
        py::gil_scoped_release release;
        Generator gen(seed);
        return g.generate(std::move(prompt), max_new_tokens, temperature, top_k, gen, top_p);
      });

  py::class_<optim::Optimizer>(m, "_Optimizer")
      .def("step", [](optim::Optimizer& o) {
        py::gil_scoped_release release;
        o.step();
      })
      .def("zero_grad", &optim::Optimizer::zero_grad)
      .def_readwrite("lr", &optim::Optimizer::lr)
      .def_property_readonly("step_count", &optim::Optimizer::step_count);
  py::class_<optim::AdamW, optim::Optimizer>(m, "_AdamW")
      .def(py::init([](const std::vector<Tensor>& params, double lr, double beta1, double beta2, double eps,
                       double weight_decay) {
        optim::AdamWOptions o;
        o.beta1 = beta1, o.beta2 = beta2, o.eps = eps, o.weight_decay = weight_decay;
        return std::make_unique<optim::AdamW>(numbered(params), lr, o);
      }));
  py::class_<optim::SGD, optim::Optimizer>(m, "_SGD")
      .def(py::init([](const std::vector<Tensor>& params, double lr, double momentum, double weight_decay,
                       bool nesterov) {
        optim::SgdOptions o;
        o.momentum = momentum, o.weight_decay = weight_decay, o.nesterov = nesterov;
        return std::make_unique<optim::SGD>(numbered(params), lr, o);
      }));
  m.def("clip_grad_norm_", [](const std::vector<Tensor>& params, double max_norm) {
    py::gil_scoped_release release;
    return optim::clip_grad_norm(params, max_norm);
  }, py::arg("parameters"), py::arg("max_norm"));
  m.def("warmup_cosine_lr", &optim::warmup_cosine_lr, py::arg("step"), py::arg("warmup_steps"),
        py::arg("total_steps"), py::arg("max_lr"), py::arg("min_lr"));

  py::class_<NoGrad>(m, "no_grad")
      .def(py::init<>())
      .def("__enter__", [](NoGrad& g) { g.guard = std::make_unique<NoGradGuard>(); })
      .def("__exit__", [](NoGrad& g, const py::args&) { g.guard.reset(); });
  m.def("is_grad_enabled", &grad_enabled);
  m.def("set_num_threads", &set_num_threads, py::arg("threads"));
  m.def("get_num_threads", &get_num_threads);
}

}  // namespace kiln::python
