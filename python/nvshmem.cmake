# The NVSHMEM of the environment a `pip install .` installs into (included by CMakeLists.txt with SY_PYTHON=ON).
# pip builds in an isolated environment whose sitecustomize hides the target's site-packages; the interpreter is
# still the target's, and -E (ignore PYTHONPATH) lets it see them. The package is built against that wheel and
# checks at import that the libnvshmem_host it loads is the same release.
find_package(Python3 COMPONENTS Interpreter REQUIRED)
execute_process(
  COMMAND ${Python3_EXECUTABLE} -E -c "import nvidia.nvshmem as m; print(list(m.__path__)[0])"
  OUTPUT_VARIABLE _sy_nvshmem_env OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
if(NOT _sy_nvshmem_env)
  message(FATAL_ERROR "switchyard's Python package: no nvidia-nvshmem-cu13 wheel in the environment of "
                      "${Python3_EXECUTABLE}. Install the one your torch depends on (pip install torch brings it), "
                      "or build the host backend only: pip install . -C cmake.define.SY_CUDA_KERNELS=OFF")
endif()
set(NVSHMEM_HOME "${_sy_nvshmem_env}")
message(STATUS "switchyard's Python package: NVSHMEM of ${Python3_EXECUTABLE}'s environment: ${NVSHMEM_HOME}")
