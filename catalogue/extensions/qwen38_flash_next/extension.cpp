// qwen38_flash_next: extension entry point (stub: registers the manifest's metadata only).
#include "gufo/ext/registry.hpp"
#include "gufo_ext_constants.hpp"

namespace c = gufo::ext::constants::qwen38_flash_next;

extern "C" void qwen38_flash_next_register(gufo::ext::Registry &registry) {
  registry.add_extension(c::name, c::version);
  registry.add_option(c::option_mtp_model);
  registry.add_option(c::option_mtp_draft_tokens);
}
