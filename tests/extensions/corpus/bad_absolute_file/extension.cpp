#include "gufo/ext/registry.hpp"

extern "C" void corpus_abs_register(gufo::ext::Registry &) {}
extern "C" void corpus_abs_provider_register(gufo::ext::Registry &) {}
