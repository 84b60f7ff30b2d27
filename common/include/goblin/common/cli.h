// Command-line helpers over CLI11 shared by every Goblin executable: size and duration
// options parsed with goblin/common/units.h, and one entry point that turns parse errors
// into a single clear message and exit code 2. Start-up only (CLI11 throws; we catch).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include <CLI/CLI.hpp>

namespace goblin {

// --name SIZE ("32M", "64G", "4kb", bytes); `allow_zero` for sizes where 0 means "off".
CLI::Option* AddSizeOption(CLI::App& app, const std::string& name, uint64_t* out,
                           const std::string& description, bool allow_zero = false);

// --name DURATION ("500ms", "30s", "1m30s"; a plain number is seconds).
CLI::Option* AddDurationOption(CLI::App& app, const std::string& name,
                               std::chrono::nanoseconds* out, const std::string& description);

// Adds --log-level (trace|debug|info|warn|error|off) wired to the logger.
void AddLogLevelOption(CLI::App& app);

// Parses argv. Returns -1 when the program should continue; otherwise the exit code to
// return from main (0 after --help/--version, 2 after an error, which has been printed as
// "<program>: error: <what>" plus a hint to run --help).
int ParseCommandLine(CLI::App& app, int argc, char** argv);

}  // namespace goblin
