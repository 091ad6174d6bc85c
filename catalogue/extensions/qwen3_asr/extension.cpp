// qwen3_asr: extension entry point (stub: registers the manifest's metadata only).
#include "gufo/ext/registry.hpp"
#include "gufo_ext_constants.hpp"

namespace c = gufo::ext::constants::qwen3_asr;

extern "C" void qwen3_asr_register(gufo::ext::Registry &registry) {
  registry.add_extension(c::name, c::version);
  registry.add_option(c::option_asr_chunk_ms);
}
