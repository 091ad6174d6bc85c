// qwen3_tts: provider entry points of cpu targets (stub: probe, factory and drivers omitted).
#include "gufo/ext/registry.hpp"
#include "gufo_ext_constants.hpp"

namespace c = gufo::ext::constants::qwen3_tts;

extern "C" void qwen3_tts_cpu_provider_register(gufo::ext::Registry &registry) {
  registry.add_provider(c::provider_qwen3_tts_cpu, "speech_synthesis", c::provider_qwen3_tts_cpu_keys);
}
