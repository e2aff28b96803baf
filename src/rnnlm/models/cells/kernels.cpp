// The shared parts of the cells' compiled loops declared in kernels.h: the hidden-side product and
// the registry of cells.

#include "kernels.h"

#include <ATen/core/dispatch/Dispatcher.h>

namespace rnnlm {

namespace {

// PyTorch's own ops for MKL's packed GEMM (what it uses for frozen nn.Linear layers on x86), looked
// up once; absent from builds without MKL.
struct PackedGemmOps {
  c10::TypedOperatorHandle<Tensor(const Tensor&, int64_t)> reorder;
  c10::TypedOperatorHandle<Tensor(const Tensor&, const Tensor&, const Tensor&, const std::optional<Tensor>&, int64_t)> linear;
};

const PackedGemmOps* packed_gemm_ops() {
  static const std::optional<PackedGemmOps> ops = []() -> std::optional<PackedGemmOps> {
    auto& dispatcher = c10::Dispatcher::singleton();
    auto reorder = dispatcher.findSchema({"mkl::_mkl_reorder_linear_weight", ""});
    auto linear = dispatcher.findSchema({"mkl::_mkl_linear", ""});
    if (!reorder || !linear) return std::nullopt;
    return PackedGemmOps{
        reorder->typed<Tensor(const Tensor&, int64_t)>(),
        linear->typed<Tensor(const Tensor&, const Tensor&, const Tensor&, const std::optional<Tensor>&, int64_t)>()};
  }();
  return ops ? &*ops : nullptr;
}

}  // namespace

StepProduct::StepProduct(const Tensor& weight, int64_t batch, int64_t steps) : weight_(weight), batch_(batch) {
  const PackedGemmOps* ops = packed_gemm_ops();
  if (ops && weight.scalar_type() == at::kFloat && steps >= kMinStepsToPack) {
    weight_ = weight.contiguous();
    packed_ = ops->reorder.call(weight_, batch_);
  }
}

Tensor StepProduct::operator()(const Tensor& x) const {
  if (packed_.defined()) return packed_gemm_ops()->linear.call(x, packed_, weight_, std::nullopt, batch_);
  return at::mm(x, weight_.t());
}

std::map<std::string, CellKernels>& cell_registry() {
  static std::map<std::string, CellKernels> registry;  // made on first use, before any cell registers
  return registry;
}

const CellKernels& find_cell(const std::string& name) {
  const auto& registry = cell_registry();
  auto found = registry.find(name);
  if (found == registry.end()) {
    std::string known;
    for (const auto& entry : registry) known += (known.empty() ? "" : ", ") + entry.first;
    TORCH_CHECK(false, "unknown cell ", name, "; the compiled cells are ", known);
  }
  return found->second;
}

}  // namespace rnnlm
