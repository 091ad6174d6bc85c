// qwen_image_21: extension entry point (stub: registers the manifest's metadata only).
#include "gufo/ext/registry.hpp"
#include "gufo_ext_constants.hpp"

namespace c = gufo::ext::constants::qwen_image_21;

extern "C" void qwen_image_21_register(gufo::ext::Registry &registry) {
  registry.add_extension(c::name, c::version);
  registry.add_option(c::option_image_steps);
}
