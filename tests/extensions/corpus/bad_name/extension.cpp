#include "gufo/ext/registry.hpp"

extern "C" void corpus_bad_name_register(gufo::ext::Registry &) {}
extern "C" void corpus_bad_name_provider_register(gufo::ext::Registry &) {}
