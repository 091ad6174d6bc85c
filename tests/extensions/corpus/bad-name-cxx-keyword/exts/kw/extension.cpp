#include "gufo/ext/registry.hpp"
#include "gufo_ext_constants.hpp"

extern "C" void kw_register(gufo::ext::Registry &registry) { (void)registry; }
extern "C" void kw_provider_register(gufo::ext::Registry &registry) { (void)registry; }
