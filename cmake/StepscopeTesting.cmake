# Shared test plumbing: Catch2 main, a header with test paths, and stepscope_add_test().
add_library(stepscope_catch_main STATIC ${CMAKE_SOURCE_DIR}/tests/support/catch_main.cpp)
target_link_libraries(stepscope_catch_main PUBLIC Catch2::Catch2)
target_include_directories(stepscope_catch_main PUBLIC ${CMAKE_SOURCE_DIR}/tests/support)
# The tests' own files are compiled at -O0 (the product's files a test compiles in, those under a src/ folder,
# keep the tree's -O2, or -O1 in a sanitized tree): what a test proves is the product's code, built as users get
# it, and a test file compiles in about half the time at -O0 (analyze_synthetic_test.cpp: 28.8 s against 12.1 s
# with GCC 12's ASan; the Catch main 34 s against 17–23 s), the CI's time (docs/reliability.md).
function(stepscope_test_code_at_O0)
  foreach(src ${ARGN})
    if(NOT src MATCHES "(^|/)src/")
      set_property(SOURCE ${src} APPEND PROPERTY COMPILE_OPTIONS -O0)
    else()
      set_property(SOURCE ${src} PROPERTY SKIP_PRECOMPILE_HEADERS ON)  # not built with the tests' flags
    endif()
  endforeach()
endfunction()
stepscope_test_code_at_O0(${CMAKE_SOURCE_DIR}/tests/support/catch_main.cpp)
# Catch2 2.13 is one 17,000-line header: parsing it and instantiating its templates is 2.3 s of each test file's
# compile at -O0 (a one-check test: 2.7 s, 0.4 s with it precompiled). The tests' files share one precompiled
# copy, built with their flags (-O0, and -fPIE: they are executables).
add_library(stepscope_test_pch OBJECT ${CMAKE_SOURCE_DIR}/tests/support/catch_pch.cpp)
set_target_properties(stepscope_test_pch PROPERTIES POSITION_INDEPENDENT_CODE OFF)
target_compile_options(stepscope_test_pch PRIVATE -O0 -fPIE)
target_link_libraries(stepscope_test_pch PRIVATE Catch2::Catch2)
target_precompile_headers(stepscope_test_pch PRIVATE <catch2/catch.hpp>)
if(CMAKE_CXX_COMPILER_ID MATCHES "Clang")
  # clang writes the headers' modification times into a PCH, so each fresh clone's differs and the compiler cache
  # (keyed by the PCH's content) missed every test file of the sanitized tree (ccache's manual, "Precompiled
  # headers").
  target_compile_options(stepscope_test_pch PRIVATE -Xclang -fno-pch-timestamp)
endif()
target_compile_definitions(stepscope_catch_main PUBLIC
  STEPSCOPE_TRACES_DIR="${STEPSCOPE_TRACES_DIR}"
  STEPSCOPE_RECORDINGS_DIR="${STEPSCOPE_RECORDINGS_DIR}"
  STEPSCOPE_SOURCE_DIR="${CMAKE_SOURCE_DIR}"
  STEPSCOPE_BINARY_DIR="${CMAKE_BINARY_DIR}"
  STEPSCOPE_PYTHON_VENV="${STEPSCOPE_PYTHON_VENV}")

# stepscope_add_test(NAME SOURCES a.cpp b.cpp LIBS x y [TIMEOUT s] [SERIAL] [PLAIN_ONLY] [FRAMEWORK_CASES])
# One executable per test file group; each Catch2 TEST_CASE becomes a CTest test. A test prints
# "SKIPPED:" (see test_support.h) when what it needs is absent, and CTest reports it as skipped.
# PLAIN_ONLY labels its tests `plain_only`: what they prove runs no instrumented stepscope code (a wheel pip
# builds itself, the plain collector under the handler guard), so the sanitized suite leaves them out.
# FRAMEWORK_CASES: the file's cases tagged [framework] run PyTorch or TensorFlow and get the label `framework`.
# Their instrumented part (launcher, attach, analyzer) is the one the framework-free cases take; what they add is
# the plain collector inside a framework, so the sanitized suite leaves them out too (docs/reliability.md).
# Cases tagged [plain_only] get the label `plain_only` in any file: their instrumented code is the one the file's
# other cases (or another sanitized test) take, and what they add is statistics over many seeded runs or the
# plain collector's behaviour; a comment beside each tag says which (docs/reliability.md).
function(stepscope_add_test name)
  # SERIAL: the test measures time shares of a real program, which other tests running beside it on a
  # small machine would skew (CI runs ctest -j$(nproc)); ctest runs it alone.
  cmake_parse_arguments(T "SERIAL;PLAIN_ONLY;FRAMEWORK_CASES" "TIMEOUT" "SOURCES;LIBS" ${ARGN})
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 300)
  endif()
  add_executable(${name} ${T_SOURCES})
  target_link_libraries(${name} PRIVATE stepscope_catch_main ${T_LIBS})
  stepscope_test_code_at_O0(${T_SOURCES})
  target_precompile_headers(${name} REUSE_FROM stepscope_test_pch)
  set(_serial FALSE)
  if(T_SERIAL)
    set(_serial TRUE)
  endif()
  set(_labels "")
  if(T_PLAIN_ONLY)
    set(_labels LABELS plain_only)
  endif()
  # A test case whose name CTest cannot pass back to Catch (a ';' splits the list) would run nothing and pass:
  # "No tests ran" fails the test instead.
  set(_properties TIMEOUT ${T_TIMEOUT} SKIP_REGULAR_EXPRESSION "SKIPPED:"
                  FAIL_REGULAR_EXPRESSION "No tests ran|No test cases matched"
                  ENVIRONMENT "QT_QPA_PLATFORM=offscreen" RUN_SERIAL ${_serial})
  # Catch's test spec: tags side by side must all match, ~ negates. Each case lands in exactly one group.
  set(_rest "")
  if(T_FRAMEWORK_CASES)
    catch_discover_tests(${name} TEST_SPEC "[framework]" TEST_PREFIX "${name}: "
      PROPERTIES ${_properties} LABELS framework)
    set(_rest "~[framework]")
  endif()
  if(T_PLAIN_ONLY)
    catch_discover_tests(${name} TEST_SPEC "${_rest}" TEST_PREFIX "${name}: " PROPERTIES ${_properties} ${_labels})
  else()
    catch_discover_tests(${name} TEST_SPEC "${_rest}~[plain_only]" TEST_PREFIX "${name}: " PROPERTIES ${_properties})
    catch_discover_tests(${name} TEST_SPEC "[plain_only]${_rest}" TEST_PREFIX "${name}: "
      PROPERTIES ${_properties} LABELS plain_only)
  endif()
endfunction()
