// qwen: provider entry points of hip targets (stub: probes as code; factory and drivers omitted).
#include "gufo/ext/registry.hpp"
#include "gufo_ext_constants.hpp"

namespace c = gufo::ext::constants::qwen;

namespace {

bool probe_qwen_q4_provider_register(const gufo::ext::ArtifactIdentity &a) {
  return a.architecture == "qwen27" && a.has("general.file_type", "15") &&
         a.tensor("blk.", ".ffn_gate_exps.weight") == nullptr;
}

}  // namespace

extern "C" void qwen_q4_provider_register(gufo::ext::Registry &registry) {
  registry.add_provider(c::provider_qwen27_q4, "text_generation", c::provider_qwen27_q4_keys, probe_qwen_q4_provider_register);
}
