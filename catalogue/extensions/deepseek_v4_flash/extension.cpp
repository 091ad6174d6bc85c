// deepseek_v4_flash: extension entry point (stub: registers the manifest's metadata only).
#include "gufo/ext/registry.hpp"
#include "gufo_ext_constants.hpp"

namespace c = gufo::ext::constants::deepseek_v4_flash;

extern "C" void deepseek_v4_flash_register(gufo::ext::Registry &registry) {
  registry.add_extension(c::name, c::version);
  registry.add_option(c::option_speculative);
  registry.add_option(c::option_dspark_depth);
}
