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

// How an event loop waits for work while busy-polling (goblin-core's shards, goblin-gateway's
// fronts): --polling auto|pause|yield, and --yield-when-polling (its older spelling of yield).
// pause spins (lowest latency, for a loop with a CPU of its own); yield calls sched_yield()
// between polls (another runnable thread on that CPU goes first); auto pauses only when
// every loop of the process has a CPU of its own.
struct PollingOption {
  std::string mode = "auto";
  bool yield_flag = false;
  // Whether loops should yield, given whether each has a CPU of its own (--cpus/--numa
  // listing at least one CPU per loop).
  bool Yield(bool every_loop_has_a_cpu) const {
    return yield_flag || mode == "yield" || (mode == "auto" && !every_loop_has_a_cpu);
  }
};
// `loops`: what the process calls its loops in the help text ("the shards", "the fronts").
void AddPollingOption(CLI::App& app, PollingOption* out, const std::string& loops);

// Parses argv. Returns -1 when the program should continue; otherwise the exit code to
// return from main (0 after --help/--version, 2 after an error, which has been printed as
// "<program>: error: <what>" plus a hint to run --help).
int ParseCommandLine(CLI::App& app, int argc, char** argv);

}  // namespace goblin
