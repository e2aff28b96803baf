// Generation on the CPU: a whole model's advance by one token (advancing.py's Advancer), the choice of the
// next token (decoding.py's pick) and the loop that alternates them (generation.py's loop), in C++.
//
// Why: at batch 1 a character of a large model streams every weight through the caches, which evicts
// the Python interpreter and the dispatcher along with everything else, so each Python call of the
// loop runs cold; here a character is the model's matrix products plus a few microseconds. The Python code stays the reference (and what
// CUDA runs); tests hold the two to each other: the same logits bit for bit, the same tokens.
//
// Each layer's advance is its cell's, found by name in the registry of compiled cells (kernels.h).

#include "kernels.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/DistributionsHelper.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <mutex>
#include <numeric>
#include <string>
#include <unordered_map>
#include <vector>

namespace rnnlm {
namespace {

// A model's state: per layer, its entries (h, or h and c).
using State = std::vector<std::vector<Tensor>>;

// ---------------------------------------------------------------- choosing the next token

enum class Strategy { greedy, temperature, top_k, top_p };

// decoding.py's Decoding, checked there; the strategy's name is read once, not at every token.
struct Decoding {
  Decoding(const std::string& name, double temperature, int64_t top_k, double top_p)
      : strategy(parse(name)), temperature(temperature), top_k(top_k), top_p(top_p) {}

  static Strategy parse(const std::string& name) {
    if (name == "greedy") return Strategy::greedy;
    if (name == "temperature") return Strategy::temperature;
    if (name == "top_k") return Strategy::top_k;
    TORCH_CHECK(name == "top_p", "unknown strategy ", name);
    return Strategy::top_p;
  }

  Strategy strategy;
  double temperature;
  int64_t top_k;
  double top_p;
};

// One row's candidate weights, as decoding.py's candidate_weights, in the same order of floating-point
// operations (so the same doubles, up to the last bit of exp): w = exp(l / T - max(l / T)); for top-k
// and top-p the tokens ranked by weight (ties: the lower id first) and all but a leading run zeroed.
template <typename scalar_t>
void candidate_weights(const scalar_t* logits, int64_t V, const Decoding& d, std::vector<double>& w,
                       std::vector<int64_t>& ranked) {
  double top = -std::numeric_limits<double>::infinity();
  for (int64_t v = 0; v < V; ++v) {
    w[v] = static_cast<double>(logits[v]) / d.temperature;
    top = std::max(top, w[v]);
  }
  for (int64_t v = 0; v < V; ++v) w[v] = std::exp(w[v] - top);
  if (d.strategy != Strategy::top_k && d.strategy != Strategy::top_p) return;

  std::iota(ranked.begin(), ranked.end(), 0);
  std::stable_sort(ranked.begin(), ranked.end(), [&](int64_t a, int64_t b) { return w[a] > w[b]; });
  int64_t kept = std::min<int64_t>(d.top_k, V);
  if (d.strategy == Strategy::top_p) {  // the leading run whose weight before each token is below p of the total
    double total = 0;
    for (int64_t v : ranked) total += w[v];
    double before = 0;
    kept = 0;
    while (kept < V && before < d.top_p * total) before += w[ranked[kept++]];
  }
  for (int64_t i = kept; i < V; ++i) w[ranked[i]] = 0;
}

// The token whose cumulative weight first exceeds u * total (w is overwritten with the cumulative
// weights); never past the last token with weight, which rounding in u * total could otherwise reach.
int64_t draw(std::vector<double>& w, double u) {
  const int64_t V = static_cast<int64_t>(w.size());
  for (int64_t v = 1; v < V; ++v) w[v] += w[v - 1];
  const double total = w[V - 1], threshold = u * total;
  int64_t drawn = 0, last = 0;
  for (int64_t v = 0; v < V; ++v) {
    drawn += w[v] <= threshold;
    last += w[v] < total;
  }
  return std::min(drawn, last);
}

// logits (B, V) -> next ids (B,): decoding.py's pick. One uniform double per row, in row order, drawn
// as torch.rand(B, dtype=torch.float64, generator=generator) draws them.
Tensor pick(const Tensor& logits_in, const Decoding& d, std::optional<at::Generator> generator) {
  const Tensor logits = logits_in.contiguous();
  const int64_t B = logits.size(0), V = logits.size(1);
  if (d.strategy == Strategy::greedy) return logits.argmax(-1);
  auto* gen = at::get_generator_or_default<at::CPUGeneratorImpl>(generator, at::detail::getDefaultCPUGenerator());
  Tensor ids = at::empty({B}, logits.options().dtype(at::kLong));
  std::vector<double> w(V);
  std::vector<int64_t> ranked(V);
  AT_DISPATCH_FLOATING_TYPES(logits.scalar_type(), "pick", [&] {
    const scalar_t* rows = logits.data_ptr<scalar_t>();
    for (int64_t b = 0; b < B; ++b) {
      candidate_weights<scalar_t>(rows + b * V, V, d, w, ranked);
      double u;
      {
        std::lock_guard<std::mutex> lock(gen->mutex_);
        u = at::uniform_real_distribution<double>(0, 1)(gen);
      }
      ids.data_ptr<int64_t>()[b] = draw(w, u);
    }
  });
  return ids;
}

// ---------------------------------------------------------------- a whole model's advance

// A RecurrentLM's weights as advancing.py's Advancer arranges them (it makes this object), and its advance.
class CompiledAdvancer {
 public:
  // cell: a registered cell's name. table (V, G*H): the first layer's input products, bias included.
  // input_t, bias: layers 1..L-1, (I, G*H) and (G*H). hidden_t: per layer, the hidden-side matrices as
  // the cell's advance takes them. norm_weight/norm_bias: the LayerNorm before the head, if any.
  CompiledAdvancer(const std::string& cell, Tensor table, std::vector<Tensor> input_t, std::vector<Tensor> bias,
                  std::vector<std::vector<Tensor>> hidden_t, std::optional<Tensor> norm_weight,
                  std::optional<Tensor> norm_bias, double norm_eps, Tensor head_t, Tensor head_bias)
      : layer_advance_(find_cell(cell).advance), table_(std::move(table)), input_t_(std::move(input_t)),
        bias_(std::move(bias)), hidden_t_(std::move(hidden_t)), norm_weight_(std::move(norm_weight)),
        norm_bias_(std::move(norm_bias)), norm_eps_(norm_eps), head_t_(std::move(head_t)),
        head_bias_(std::move(head_bias)) {}

  // tokens (B,), state (per layer its entries, h or h and c, each (B, H); empty means zeros) -> logits
  // (B, V), the new state in the same layout (rnnlm.models.state.to_lists).
  std::tuple<Tensor, State> advance(const Tensor& tokens, const State& state) const {
    const size_t layers = hidden_t_.size();
    TORCH_CHECK(state.empty() || state.size() == layers, "expected the state of ", layers, " layers, got ",
                state.size());
    static const std::vector<Tensor> zeros;  // an empty layer state: the cell starts from zeros
    State next;
    Tensor x;  // (B, H): the output of the layer below
    for (size_t l = 0; l < layers; ++l) {
      const Tensor gates_x = l == 0 ? table_.index_select(0, tokens) : narrow_linear(bias_[l - 1], x, input_t_[l - 1]);
      next.push_back(layer_advance_(gates_x, state.empty() ? zeros : state[l], hidden_t_[l]));
      x = next[l][0];
    }
    if (norm_weight_) x = at::layer_norm(x, {x.size(1)}, norm_weight_, norm_bias_, norm_eps_);
    return {narrow_linear(head_bias_, x, head_t_), next};
  }

  // generation.py's loop from the prompt's logits (N, V) and state: pick a token, advance (carrying the
  // state if `stateful`, from zeros if not), repeat -> the new ids (N, max_new_tokens). `on_token`, if
  // given, is called with each token's ids (N,) as soon as they are picked.
  // Stateless with one row, the logits after a token depend on that token alone: each token's are
  // computed once and looked up after (the same bits: an advance of one token from zeros is the same
  // computation every time), so a sample costs at most one advance per token of the vocabulary.
  Tensor generate(Tensor logits, State state, bool stateful, int64_t max_new_tokens, const std::string& strategy,
                  double temperature, int64_t top_k, double top_p, std::optional<at::Generator> generator,
                  std::optional<py::function> on_token) const {
    const Decoding decoding{strategy, temperature, top_k, top_p};
    const bool one_stateless_row = !stateful && logits.size(0) == 1;
    std::unordered_map<int64_t, Tensor> after_token;  // one stateless row: token id -> its logits (1, V)
    std::vector<Tensor> picked;
    for (int64_t i = 0; i < max_new_tokens; ++i) {
      if (PyErr_CheckSignals() != 0) throw py::error_already_set();  // Ctrl-C stops a long generation
      Tensor ids = pick(logits, decoding, generator);
      picked.push_back(ids);
      if (on_token) (*on_token)(ids);
      if (i + 1 == max_new_tokens) break;
      if (!one_stateless_row) {
        std::tie(logits, state) = advance(ids, stateful ? state : State{});
        continue;
      }
      const int64_t token = ids.data_ptr<int64_t>()[0];
      auto seen = after_token.find(token);
      if (seen == after_token.end()) seen = after_token.emplace(token, std::get<0>(advance(ids, State{}))).first;
      logits = seen->second;
    }
    if (picked.empty()) return at::empty({logits.size(0), 0}, logits.options().dtype(at::kLong));
    return at::stack(picked, 1);
  }

 private:
  LayerAdvance layer_advance_;
  Tensor table_;
  std::vector<Tensor> input_t_, bias_;
  std::vector<std::vector<Tensor>> hidden_t_;
  std::optional<Tensor> norm_weight_, norm_bias_;
  double norm_eps_;
  Tensor head_t_, head_bias_;
};

}  // namespace

void bind_generation(pybind11::module_& m) {
  m.def(
      "pick",
      [](const at::Tensor& logits, const std::string& strategy, double temperature, int64_t top_k, double top_p,
         std::optional<at::Generator> generator) { return pick(logits, {strategy, temperature, top_k, top_p}, generator); },
      "logits (B, V) -> next ids (B,), as rnnlm.inference.decoding.pick");
  py::class_<CompiledAdvancer>(m, "Advancer")
      .def(py::init<std::string, at::Tensor, std::vector<at::Tensor>, std::vector<at::Tensor>,
                    std::vector<std::vector<at::Tensor>>, std::optional<at::Tensor>, std::optional<at::Tensor>, double,
                    at::Tensor, at::Tensor>())
      .def("advance", &CompiledAdvancer::advance)
      .def("generate", &CompiledAdvancer::generate);
}

}  // namespace rnnlm
