// qwen38_flash_next: provider entry points of hip targets (stub: probes as code; factory and drivers omitted).
#include "gufo/ext/registry.hpp"
#include "gufo_ext_constants.hpp"

namespace c = gufo::ext::constants::qwen38_flash_next;

namespace {

bool probe_qwen38_flash_next_provider_register(const gufo::ext::ArtifactIdentity &a) {
  // Q4_K_M files only (general.file_type 15): a GSQ or other quantized variant is another provider's.
  return a.architecture == "qwen4exp" && a.has("qwen4exp.expert_count", "64") && a.has("general.file_type", "15");
}

}  // namespace

extern "C" void qwen38_flash_next_provider_register(gufo::ext::Registry &registry) {
  registry.add_provider(c::provider_flash_next_q4, "text_generation", c::provider_flash_next_q4_keys, probe_qwen38_flash_next_provider_register);
}
