// deepseek_v4_flash: provider entry points of hip targets (stub: probes as code; factory and drivers omitted).
#include "gufo/ext/registry.hpp"
#include "gufo_ext_constants.hpp"

namespace c = gufo::ext::constants::deepseek_v4_flash;

namespace {

bool probe_deepseek_v4_flash_provider_register(const gufo::ext::ArtifactIdentity &a) {
  return a.architecture == "deepseek4" && a.tensor("blk.", ".attn_kv_a_mqa.weight") != nullptr;
}

}  // namespace

extern "C" void deepseek_v4_flash_provider_register(gufo::ext::Registry &registry) {
  registry.add_provider(c::provider_deepseek4, "text_generation", c::provider_deepseek4_keys, probe_deepseek_v4_flash_provider_register);
}
