// qwen3_tts: extension entry point (stub: registers the manifest's metadata only).
#include "gufo/ext/registry.hpp"
#include "gufo_ext_constants.hpp"

namespace c = gufo::ext::constants::qwen3_tts;

extern "C" void qwen3_tts_register(gufo::ext::Registry &registry) {
  registry.add_extension(c::name, c::version);
  registry.add_option(c::option_voice);
}
