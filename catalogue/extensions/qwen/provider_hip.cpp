// qwen: provider entry points of hip targets (stub: probe, factory and drivers omitted).
#include "gufo/ext/registry.hpp"
#include "gufo_ext_constants.hpp"

namespace c = gufo::ext::constants::qwen;

extern "C" void qwen_q4_provider_register(gufo::ext::Registry &registry) {
  registry.add_provider(c::provider_qwen27_q4, "text_generation", c::provider_qwen27_q4_keys);
}
