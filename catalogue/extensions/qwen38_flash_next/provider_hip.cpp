// qwen38_flash_next: provider entry points of hip targets (stub: probes as code; factory and drivers omitted).
#include "gufo/ext/registry.hpp"
#include "gufo_ext_constants.hpp"

namespace c = gufo::ext::constants::qwen38_flash_next;

namespace {

bool probe_qwen38_flash_next_provider_register(const gufo::ext::ArtifactIdentity &a) {
  // Q4_K / Q6_K experts only: a GSQ or other quantized variant is another provider's to run.
  const gufo::ext::TensorDesc *experts = a.tensor("blk.", ".ffn_gate_exps.weight");
  return a.architecture == "qwen4exp" && a.has("qwen4exp.expert_count", "64") && experts != nullptr &&
         (experts->type == "Q4_K" || experts->type == "Q6_K");
}

}  // namespace

extern "C" void qwen38_flash_next_provider_register(gufo::ext::Registry &registry) {
  registry.add_provider(c::provider_flash_next_q4, "text_generation", c::provider_flash_next_q4_keys, probe_qwen38_flash_next_provider_register);
}
