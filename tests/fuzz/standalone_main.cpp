// Driver for fuzz targets in builds without libFuzzer (gcc, the sanitizer build): replays
// every file of the given corpus directories, then runs a bounded number of deterministic
// mutations of them (bit flips, byte insertions and deletions, truncations, splices,
// random buffers). Usage: target [--iterations=N] [--seed=S] [DIR|FILE]...
// It proves less than coverage-guided fuzzing (the Fuzz build type does that), but it keeps
// every parser under ASan/UBSan in every test run.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

struct Rng {
  uint64_t s;
  uint64_t Next() {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    return s;
  }
  size_t Below(size_t n) { return n == 0 ? 0 : static_cast<size_t>(Next() % n); }
};

void Run(const std::vector<uint8_t>& in) {
  // A copy of exactly the right size, so ASan sees any read past the end.
  auto* buf = static_cast<uint8_t*>(std::malloc(in.size() + 1));
  if (!in.empty()) std::memcpy(buf, in.data(), in.size());
  LLVMFuzzerTestOneInput(buf, in.size());
  std::free(buf);
}

}  // namespace

int main(int argc, char** argv) {
  long iterations = 10000;
  uint64_t seed = 0x243f6a8885a308d3ULL;
  std::vector<std::vector<uint8_t>> corpus;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a.rfind("--iterations=", 0) == 0) {
      iterations = std::strtol(a.c_str() + 13, nullptr, 10);
    } else if (a.rfind("--seed=", 0) == 0) {
      seed = std::strtoull(a.c_str() + 7, nullptr, 0);
    } else {
      std::filesystem::path p(a);
      std::vector<std::filesystem::path> files;
      if (std::filesystem::is_directory(p)) {
        for (auto& e : std::filesystem::directory_iterator(p)) {
          if (e.is_regular_file()) files.push_back(e.path());
        }
      } else if (std::filesystem::exists(p)) {
        files.push_back(p);
      }
      std::sort(files.begin(), files.end());
      for (auto& f : files) {
        std::ifstream in(f, std::ios::binary);
        corpus.emplace_back(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
      }
    }
  }
  if (corpus.empty()) corpus.push_back({});
  for (auto& c : corpus) Run(c);
  Rng rng{seed | 1};
  for (long it = 0; it < iterations; ++it) {
    std::vector<uint8_t> in = corpus[rng.Below(corpus.size())];
    int rounds = 1 + static_cast<int>(rng.Below(4));
    for (int r = 0; r < rounds; ++r) {
      switch (rng.Below(7)) {
        case 0:
          if (!in.empty()) in[rng.Below(in.size())] ^= static_cast<uint8_t>(1u << rng.Below(8));
          break;
        case 1:
          in.insert(in.begin() + static_cast<long>(rng.Below(in.size() + 1)),
                    static_cast<uint8_t>(rng.Next()));
          break;
        case 2:
          if (!in.empty()) in.erase(in.begin() + static_cast<long>(rng.Below(in.size())));
          break;
        case 3:
          in.resize(rng.Below(in.size() + 1));
          break;
        case 4: {
          const auto& other = corpus[rng.Below(corpus.size())];
          size_t from = rng.Below(other.size() + 1);
          in.insert(in.begin() + static_cast<long>(rng.Below(in.size() + 1)),
                    other.begin() + static_cast<long>(from), other.end());
          break;
        }
        case 5:
          if (!in.empty()) in[rng.Below(in.size())] = static_cast<uint8_t>(rng.Next());
          break;
        default: {
          in.resize(rng.Below(64));
          for (auto& b : in) b = static_cast<uint8_t>(rng.Next());
          break;
        }
      }
    }
    Run(in);
  }
  std::printf("%s: %zu corpus inputs and %ld mutations ran clean\n", argv[0], corpus.size(),
              iterations);
  return 0;
}
