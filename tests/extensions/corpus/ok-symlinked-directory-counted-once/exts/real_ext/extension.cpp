#include "gufo/ext/registry.hpp"
#include "gufo_ext_constants.hpp"

extern "C" void real_ext_register(gufo::ext::Registry &registry) { (void)registry; }
extern "C" void real_ext_provider_register(gufo::ext::Registry &registry) { (void)registry; }
