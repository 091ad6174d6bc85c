#include "gufo/ext/registry.hpp"
#include "gufo_ext_constants.hpp"

extern "C" void provfield_register(gufo::ext::Registry &registry) { (void)registry; }
extern "C" void provfield_provider_register(gufo::ext::Registry &registry) { (void)registry; }
