#include "gufo/ext/registry.hpp"

extern "C" void corpus_dd_register(gufo::ext::Registry &) {}
extern "C" void corpus_dd_provider_register(gufo::ext::Registry &) {}
