// qwen38_flash_next: provider entry points of hip targets (stub: probe, factory and drivers omitted).
#include "gufo/ext/registry.hpp"
#include "gufo_ext_constants.hpp"

namespace c = gufo::ext::constants::qwen38_flash_next;

extern "C" void qwen38_flash_next_provider_register(gufo::ext::Registry &registry) {
  registry.add_provider(c::provider_flash_next_q4, "text_generation", c::provider_flash_next_q4_keys);
}
