#include "gufo/ext/registry.hpp"
#include "gufo_ext_constants.hpp"

extern "C" void future_register(gufo::ext::Registry &registry) { (void)registry; }
extern "C" void future_provider_register(gufo::ext::Registry &registry) { (void)registry; }
