// qwen: provider entry points of cpu targets (stub: probes as code; factory and drivers omitted).
#include "gufo/ext/registry.hpp"
#include "gufo_ext_constants.hpp"

namespace c = gufo::ext::constants::qwen;

namespace {

bool probe_qwen_cpu_provider_register(const gufo::ext::ArtifactIdentity &a) {
  return a.architecture == "qwen27" && a.tensor("blk.", ".ffn_gate_exps.weight") == nullptr;
}

bool probe_qwen_guard_provider_register(const gufo::ext::ArtifactIdentity &a) {
  return a.architecture == "qwen27guard";
}

}  // namespace

extern "C" void qwen_cpu_provider_register(gufo::ext::Registry &registry) {
  registry.add_provider(c::provider_qwen27_cpu, "text_generation", c::provider_qwen27_cpu_keys, probe_qwen_cpu_provider_register);
}

extern "C" void qwen_guard_provider_register(gufo::ext::Registry &registry) {
  registry.add_provider(c::provider_qwen_guard, "decisions", c::provider_qwen_guard_keys, probe_qwen_guard_provider_register);
}
