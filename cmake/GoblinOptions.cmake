# Build types, warnings, sanitizers, ccache.
#   Release  -O2 -march=${GOBLIN_ARCH}, assertions off
#   Debug    -O0 -g
#   Asan     -O1 -g1, AddressSanitizer + UndefinedBehaviorSanitizer, every UB report fatal
#            (scripts/test.sh builds it with clang 16: it compiles faster than gcc there)
#   Tsan     -O1 -g1, ThreadSanitizer (the threaded parts: rings, server loop)
# Sanitizer builds keep line tables only (-g1: every report still names file:line, and
# compiles take a fifth less), and code off the data path (command lines, the admin service)
# is compiled at -O0 there (goblin_setup_code below): the code under test keeps -O1.
#   Fuzz     (with GOBLIN_FUZZ_ONLY, clang) libFuzzer + ASan + UBSan
if(NOT CMAKE_BUILD_TYPE AND NOT CMAKE_CONFIGURATION_TYPES)
  set(CMAKE_BUILD_TYPE Release CACHE STRING "Build type" FORCE)
endif()
set_property(CACHE CMAKE_BUILD_TYPE PROPERTY STRINGS Release Debug Asan Tsan Fuzz RelWithDebInfo)

find_program(GOBLIN_CCACHE ccache)
if(GOBLIN_CCACHE)
  set(CMAKE_C_COMPILER_LAUNCHER ${GOBLIN_CCACHE})
  set(CMAKE_CXX_COMPILER_LAUNCHER ${GOBLIN_CCACHE})
endif()

set(_san "-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer")
set(CMAKE_CXX_FLAGS_RELEASE "-O2 -DNDEBUG -march=${GOBLIN_ARCH}")
set(CMAKE_C_FLAGS_RELEASE "-O2 -DNDEBUG -march=${GOBLIN_ARCH}")
set(CMAKE_CXX_FLAGS_ASAN "-O1 -g1 ${_san}")
set(CMAKE_C_FLAGS_ASAN "-O1 -g1 ${_san}")
set(CMAKE_EXE_LINKER_FLAGS_ASAN "${_san}")
set(CMAKE_SHARED_LINKER_FLAGS_ASAN "${_san}")
# clang 16 implements what libstdc++ 12's <expected> needs (P0848) but still advertises the
# older __cpp_concepts value, which hides std::expected; raise it for the Fuzz build only.
set(_tsan "-fsanitize=thread -fno-omit-frame-pointer")
set(CMAKE_CXX_FLAGS_TSAN "-O1 -g1 ${_tsan}")
set(CMAKE_C_FLAGS_TSAN "-O1 -g1 ${_tsan}")
set(CMAKE_EXE_LINKER_FLAGS_TSAN "${_tsan}")
set(CMAKE_SHARED_LINKER_FLAGS_TSAN "${_tsan}")
set(CMAKE_CXX_FLAGS_FUZZ
    "-O1 -g ${_san} -fsanitize=fuzzer-no-link -D__cpp_concepts=202002L -Wno-macro-redefined")
set(CMAKE_C_FLAGS_FUZZ "-O1 -g ${_san} -fsanitize=fuzzer-no-link")
set(CMAKE_EXE_LINKER_FLAGS_FUZZ "${_san}")

add_compile_options(-Wall -Wextra -Wno-unused-parameter -Wno-missing-field-initializers)
if(CMAKE_CXX_COMPILER_ID STREQUAL "Clang" AND NOT CMAKE_BUILD_TYPE STREQUAL "Fuzz")
  # (see the Fuzz flags above: std::expected under clang 16 with libstdc++ 12)
  add_compile_options($<$<COMPILE_LANGUAGE:CXX>:-D__cpp_concepts=202002L>
                      $<$<COMPILE_LANGUAGE:CXX>:-Wno-macro-redefined>)
endif()
if(CMAKE_BUILD_TYPE STREQUAL "Tsan" AND CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
  add_compile_options(-Wno-tsan)  # TSan does not model fences; our data is ordered by acquire/release
endif()
if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
  # GCC 12's -Wmaybe-uninitialized is noisy on std::expected at -O1/-O2.
  add_compile_options(-Wno-maybe-uninitialized)
endif()

# goblin_setup_code(TARGET t | SOURCES file...)
#   Marks code off the data path (a program's command line: CLI11 alone costs ~50 s per
#   file at -O1 under ASan; the admin service) to be compiled at -O0 in the sanitizer
#   builds, which halves its compile time; nothing changes in other builds.
function(goblin_setup_code)
  cmake_parse_arguments(S "" "TARGET" "SOURCES" ${ARGN})
  set(opt $<$<CONFIG:Asan,Tsan>:-O0>)
  if(S_TARGET)
    target_compile_options(${S_TARGET} PRIVATE ${opt})
  endif()
  if(S_SOURCES)
    set_property(SOURCE ${S_SOURCES} APPEND PROPERTY COMPILE_OPTIONS ${opt})
  endif()
endfunction()
