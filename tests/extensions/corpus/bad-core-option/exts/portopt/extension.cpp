#include "gufo/ext/registry.hpp"
#include "gufo_ext_constants.hpp"

extern "C" void portopt_register(gufo::ext::Registry &registry) { (void)registry; }
extern "C" void portopt_provider_register(gufo::ext::Registry &registry) { (void)registry; }
