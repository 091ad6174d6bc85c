// qwen_image_21: provider entry points of hip targets (stub: probes as code; factory and drivers omitted).
#include "gufo/ext/registry.hpp"
#include "gufo_ext_constants.hpp"

namespace c = gufo::ext::constants::qwen_image_21;

namespace {

bool probe_qwen_image_21_provider_register(const gufo::ext::ArtifactIdentity &a) {
  return a.architecture == "qwenimage" && a.has("qwenimage.version", "2.1");
}

}  // namespace

extern "C" void qwen_image_21_provider_register(gufo::ext::Registry &registry) {
  registry.add_provider(c::provider_qwen_image_21, "image_generation", c::provider_qwen_image_21_keys, probe_qwen_image_21_provider_register);
}
