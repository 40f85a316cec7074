// Every environment variable Loom reads, declared in one table with its default and a
// one-line description. docs/ENVIRONMENT.md is generated from the same table
// (`loom-info --env-markdown`), and a test keeps the two equal.
//
// Values are read when a communicator is created (and the log settings at the first log
// line), never cached across communicators, so a test can change them between inits.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "base/status.h"

namespace loom::env {

struct Variable {
  const char* name;
  const char* defaultValue;  // "" when there is none
  const char* section;       // heading in docs/ENVIRONMENT.md
  const char* description;
};

// The table, in documentation order.
const std::vector<Variable>& variables();

// Where a setting is read from: the process's environment, or the table's defaults alone (a
// config that must not depend on the job's settings: communicator.h, builtInConfig).
enum class From { kEnvironment, kDefaults };

// The variable's value when set and non-empty (never, from kDefaults). `name` must be declared
// in the table (asking for an undeclared one is a programming error and throws
// std::logic_error in debug and release alike, so a new variable cannot skip the
// documentation).
std::optional<std::string> get(const char* name, From from = From::kEnvironment);

// The value, or the declared default when unset.
std::string getOrDefault(const char* name, From from = From::kEnvironment);

// The declared default, whatever the environment says.
std::string declaredDefault(const char* name);

// Parses an integer variable (unset: its default) within [min, max]; a non-number or a
// value out of range is loomInvalidArgument naming the variable and the value.
Status getInt(const char* name, long long min, long long max, long long* out, From from = From::kEnvironment);

// The items of a comma-separated value ("a,b,,c" -> a, b, c; empty items dropped).
std::vector<std::string> splitList(const std::string& value);

// The table rendered as the Markdown of docs/ENVIRONMENT.md.
std::string markdown();

}  // namespace loom::env
