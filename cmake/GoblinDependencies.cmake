# Finds every external package once and turns the GOBLIN_WITH_* options into GOBLIN_HAVE_*
# values, written to the generated header goblin/common/config.h. Only implementation files
# test GOBLIN_HAVE_*; public headers never do.
find_package(PkgConfig REQUIRED)
find_package(Threads REQUIRED)
find_package(fmt REQUIRED)
pkg_check_modules(GOBLIN_PKG_XXHASH REQUIRED IMPORTED_TARGET libxxhash)

set(GOBLIN_HAVE_UCX 0)
set(GOBLIN_HAVE_URING 0)
set(GOBLIN_HAVE_NUMA 0)
set(GOBLIN_HAVE_VERBS 0)

macro(goblin_optional_pkg opt have target)
  if(${opt})
    pkg_check_modules(${target} IMPORTED_TARGET ${ARGN})
    if(${target}_FOUND)
      set(${have} 1)
    else()
      message(WARNING "${opt} is ON but ${ARGN} was not found: building without it "
                      "(run scripts/install-deps.sh)")
    endif()
  endif()
endmacro()

goblin_optional_pkg(GOBLIN_WITH_UCX GOBLIN_HAVE_UCX GOBLIN_PKG_UCX ucx)
goblin_optional_pkg(GOBLIN_WITH_URING GOBLIN_HAVE_URING GOBLIN_PKG_URING liburing)
goblin_optional_pkg(GOBLIN_WITH_NUMA GOBLIN_HAVE_NUMA GOBLIN_PKG_NUMA numa)
goblin_optional_pkg(GOBLIN_WITH_VERBS GOBLIN_HAVE_VERBS GOBLIN_PKG_VERBS libibverbs librdmacm)

find_package(Python3 REQUIRED COMPONENTS Interpreter)
# HTTP/2 on the gateway (also in fuzz-only builds: fuzz_h2 runs nghttp2's server session)
pkg_check_modules(GOBLIN_PKG_NGHTTP2 REQUIRED IMPORTED_TARGET libnghttp2)

if(NOT GOBLIN_FUZZ_ONLY)
  # HTTPS on the gateway (TLS 1.2/1.3, SNI, ALPN, kTLS) and its tests
  find_package(OpenSSL 3 REQUIRED)
  find_package(CLI11 CONFIG QUIET)
  if(NOT CLI11_FOUND)
    find_path(GOBLIN_CLI11_INCLUDE CLI/CLI.hpp REQUIRED)
    add_library(CLI11::CLI11 INTERFACE IMPORTED)
    target_include_directories(CLI11::CLI11 INTERFACE ${GOBLIN_CLI11_INCLUDE})
  endif()
endif()

message(STATUS "goblin: ucx=${GOBLIN_HAVE_UCX} io_uring=${GOBLIN_HAVE_URING} "
               "numa=${GOBLIN_HAVE_NUMA} verbs=${GOBLIN_HAVE_VERBS} "
               "build=${CMAKE_BUILD_TYPE} compiler=${CMAKE_CXX_COMPILER_ID}")
