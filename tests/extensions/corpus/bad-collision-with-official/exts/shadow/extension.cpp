#include "gufo/ext/registry.hpp"
#include "gufo_ext_constants.hpp"

extern "C" void shadow_register(gufo::ext::Registry &registry) { (void)registry; }
extern "C" void shadow_provider_register(gufo::ext::Registry &registry) { (void)registry; }
