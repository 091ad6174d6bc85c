// deepseek_v4_flash: provider entry points of hip targets (stub: probe, factory and drivers omitted).
#include "gufo/ext/registry.hpp"
#include "gufo_ext_constants.hpp"

namespace c = gufo::ext::constants::deepseek_v4_flash;

extern "C" void deepseek_v4_flash_provider_register(gufo::ext::Registry &registry) {
  registry.add_provider(c::provider_deepseek4, "text_generation", c::provider_deepseek4_keys);
}
