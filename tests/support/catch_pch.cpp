// The target that owns the tests' precompiled Catch2 header (cmake/StepscopeTesting.cmake): it compiles nothing
// of its own.
