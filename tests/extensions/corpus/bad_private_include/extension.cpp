#include "core/runner.hpp"
#include "gufo/ext/registry.hpp"

extern "C" void corpus_pi_register(gufo::ext::Registry &) {}
extern "C" void corpus_pi_provider_register(gufo::ext::Registry &) {}
