// Kiln's public C++ API in one include: tensors on the CPU or a GPU, autograd
// ops, modules and layers (LoRA too), optimizers, checkpoints and safetensors,
// and the models Kiln builds or loads from Hugging Face folders.
//   #include <kiln/kiln.h>   (find_package(Kiln) / pkg-config kiln)
#pragma once

#include "kiln/version.h"

#include "kiln/core/device.h"
#include "kiln/core/dtype.h"
#include "kiln/core/error.h"
#include "kiln/core/random.h"
#include "kiln/core/tensor.h"

#include "kiln/autograd/grad_mode.h"
#include "kiln/autograd/ops.h"
#include "kiln/backend/factory.h"

#include "kiln/nn/distillation.h"
#include "kiln/nn/init.h"
#include "kiln/nn/layers.h"
#include "kiln/nn/lora.h"
#include "kiln/nn/module.h"

#include "kiln/optim/optimizer.h"

#include "kiln/io/checkpoint.h"
#include "kiln/io/safetensors.h"

#include "kiln/data/fashion_mnist.h"
#include "kiln/data/fortunes.h"
#include "kiln/text/hf_tokenizer.h"

#include "models/common/language_model.h"
#include "models/gpt/gpt.h"
#include "models/hf/hf_model.h"
