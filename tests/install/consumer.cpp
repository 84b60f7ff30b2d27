// A program outside the tree that uses the installed libgoblin (find_package or pkg-config):
// connects to the target in argv[1], pings, stores an object, reads it back, deletes it.
#include <goblin/client/connection.h>

#include <cstdio>
#include <vector>

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: consumer TARGET\n");
    return 2;
  }
  auto c = goblin::client::Connection::Open(argv[1]);
  if (!c) {
    std::fprintf(stderr, "consumer: %s\n", c.error().ToString().c_str());
    return 1;
  }
  std::vector<uint8_t> data(300'000);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>(i * 7);
  std::vector<uint8_t> back;
  bool ok = (*c)->Ping() && (*c)->Put("consumer/obj", data) &&
            (*c)->Get("consumer/obj",
                      [&](uint64_t, std::span<const uint8_t> b) {
                        back.insert(back.end(), b.begin(), b.end());
                        return goblin::VoidResult();
                      }) &&
            back == data && (*c)->Delete("consumer/obj").value_or(false);
  std::printf("%s\n", ok ? "ok" : "FAILED");
  return ok ? 0 : 1;
}
