// qwen3_asr: provider entry points of hip targets (stub: probes as code; factory and drivers omitted).
#include "gufo/ext/registry.hpp"
#include "gufo_ext_constants.hpp"

namespace c = gufo::ext::constants::qwen3_asr;

namespace {

bool probe_qwen3_asr_provider_register(const gufo::ext::ArtifactIdentity &a) {
  return a.architecture == "qwen3asr" && a.tensor("audio_enc.conv1.weight") != nullptr;
}

}  // namespace

extern "C" void qwen3_asr_provider_register(gufo::ext::Registry &registry) {
  registry.add_provider(c::provider_qwen3_asr, "speech_recognition", c::provider_qwen3_asr_keys, probe_qwen3_asr_provider_register);
}
