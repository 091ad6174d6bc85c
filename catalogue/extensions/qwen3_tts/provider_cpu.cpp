// qwen3_tts: provider entry points of cpu targets (stub: probes as code; factory and drivers omitted).
#include "gufo/ext/registry.hpp"
#include "gufo_ext_constants.hpp"

namespace c = gufo::ext::constants::qwen3_tts;

namespace {

bool probe_qwen3_tts_cpu_provider_register(const gufo::ext::ArtifactIdentity &a) {
  return a.architecture == "qwen3tts" && a.tensor("codec.", "") != nullptr;
}

}  // namespace

extern "C" void qwen3_tts_cpu_provider_register(gufo::ext::Registry &registry) {
  registry.add_provider(c::provider_qwen3_tts_cpu, "speech_synthesis", c::provider_qwen3_tts_cpu_keys, probe_qwen3_tts_cpu_provider_register);
}
