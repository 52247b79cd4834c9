// A C program that embeds CPython through dlopen once it is running, as some C++ hosts do: libpython is not
// there when the collector starts. Usage: embed_late LIBPYTHON CODE (PYTHONHOME names the interpreter's
// prefix).
#include <dlfcn.h>
#include <stdio.h>
#include <unistd.h>

int main(int argc, char** argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: embed_late LIBPYTHON CODE\n");
    return 2;
  }
  usleep(300000);  // the collector thread has started and looked for CPython by now
  void* py = dlopen(argv[1], RTLD_NOW | RTLD_GLOBAL);
  if (!py) {
    fprintf(stderr, "embed_late: %s\n", dlerror());
    return 2;
  }
  void (*initialize)(int) = (void (*)(int))dlsym(py, "Py_InitializeEx");
  int (*run)(const char*) = (int (*)(const char*))dlsym(py, "PyRun_SimpleString");
  int (*finalize)(void) = (int (*)(void))dlsym(py, "Py_FinalizeEx");
  if (!initialize || !run || !finalize) {
    fprintf(stderr, "embed_late: %s lacks the embedding API\n", argv[1]);
    return 2;
  }
  initialize(0);
  const int failed = run(argv[2]);
  finalize();
  return failed ? 1 : 0;
}
