// qwen3_asr: provider entry points of hip targets (stub: probe, factory and drivers omitted).
#include "gufo/ext/registry.hpp"
#include "gufo_ext_constants.hpp"

namespace c = gufo::ext::constants::qwen3_asr;

extern "C" void qwen3_asr_provider_register(gufo::ext::Registry &registry) {
  registry.add_provider(c::provider_qwen3_asr, "speech_recognition", c::provider_qwen3_asr_keys);
}
