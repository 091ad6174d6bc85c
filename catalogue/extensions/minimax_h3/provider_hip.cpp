// minimax_h3: provider entry points of hip targets (stub: probes as code; factory and drivers omitted).
#include "gufo/ext/registry.hpp"
#include "gufo_ext_constants.hpp"

namespace c = gufo::ext::constants::minimax_h3;

namespace {

bool probe_minimax_h3_provider_register(const gufo::ext::ArtifactIdentity &a) {
  return a.architecture == "minimaxh3" && a.tensor("vae.decoder.", "") != nullptr;
}

}  // namespace

extern "C" void minimax_h3_provider_register(gufo::ext::Registry &registry) {
  registry.add_provider(c::provider_minimax_h3, "video_generation", c::provider_minimax_h3_keys, probe_minimax_h3_provider_register);
}
