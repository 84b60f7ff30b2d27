#include "goblin/common/cli.h"

#include <cstdio>

#include "goblin/common/log.h"
#include "goblin/common/units.h"

namespace goblin {

CLI::Option* AddSizeOption(CLI::App& app, const std::string& name, uint64_t* out,
                           const std::string& description, bool allow_zero) {
  auto* opt = app.add_option_function<std::string>(
      name,
      [out, name, allow_zero](const std::string& text) {
        auto r = ParseSize(text, {.allow_zero = allow_zero});
        if (!r) throw CLI::ValidationError(name, r.error().message());
        *out = *r;
      },
      description);
  opt->type_name("SIZE");
  opt->default_str(FormatSize(*out));
  return opt;
}

CLI::Option* AddDurationOption(CLI::App& app, const std::string& name,
                               std::chrono::nanoseconds* out, const std::string& description) {
  auto* opt = app.add_option_function<std::string>(
      name,
      [out, name](const std::string& text) {
        auto r = ParseDuration(text);
        if (!r) throw CLI::ValidationError(name, r.error().message());
        *out = *r;
      },
      description);
  opt->type_name("DURATION");
  opt->default_str(FormatDuration(*out));
  return opt;
}

void AddLogLevelOption(CLI::App& app) {
  app.add_option_function<std::string>(
         "--log-level",
         [](const std::string& text) {
           auto r = ParseLogLevel(text);
           if (!r) throw CLI::ValidationError("--log-level", r.error().message());
           SetLogLevel(*r);
         },
         "trace, debug, info, warn, error or off (also: GOBLIN_LOG)")
      ->type_name("LEVEL");
}

void AddPollingOption(CLI::App& app, PollingOption* out, const std::string& loops) {
  app.add_option("--polling", out->mode,
                 "How " + loops +
                     " wait for work while busy-polling: pause (spin: lowest latency, for "
                     "CPUs of their own), yield (give the CPU to any other runnable thread "
                     "between polls: for CPUs shared with other Goblin processes and clients), "
                     "auto (pause when --cpus/--numa give every loop a CPU of its own, else "
                     "yield)")
      ->check(CLI::IsMember({"auto", "pause", "yield"}))
      ->capture_default_str();
  app.add_flag("--yield-when-polling", out->yield_flag, "Same as --polling yield");
}

int ParseCommandLine(CLI::App& app, int argc, char** argv) {
  InitLogFromEnv();
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "%s: error: %s\nRun '%s --help' for the options.\n",
                 app.get_name().c_str(), e.what(), app.get_name().c_str());
    return 2;
  }
  return -1;
}

}  // namespace goblin
