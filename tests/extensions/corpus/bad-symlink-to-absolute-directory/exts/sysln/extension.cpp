#include "gufo/ext/registry.hpp"
#include "gufo_ext_constants.hpp"

extern "C" void sysln_register(gufo::ext::Registry &registry) { (void)registry; }
extern "C" void sysln_provider_register(gufo::ext::Registry &registry) { (void)registry; }
