# CMake toolchain file for building Horovod 0.28.1 against torch >= 2.1.
#
# Why: horovod/torch/CMakeLists.txt sets CMAKE_CXX_STANDARD 14, but the headers of
# recent torch releases (2.14 here) need C++20. We do not patch Horovod's source;
# instead setup.sh hands this file to CMake via the CMAKE_TOOLCHAIN_FILE environment
# variable (CMake >= 3.21 reads it), and the one setting below appends
# -std=gnu++20 *after* <FLAGS>, which is where CMake puts its own -std=... flag.
# GCC and Clang honour the last -std given, so every C++ object is compiled as C++20.
#
# CMakeCXXInformation.cmake only sets CMAKE_CXX_COMPILE_OBJECT when it is still
# undefined, so defining it here (before the language is enabled) takes effect.
set(CMAKE_CXX_COMPILE_OBJECT
    "<CMAKE_CXX_COMPILER> <DEFINES> <INCLUDES> <FLAGS> -std=gnu++20 -o <OBJECT> -c <SOURCE>")
