# find_package(idcontrol_driver) for the header-only C++17 driver client (idcontrol/driver.hpp).
# Where it is: `idcontrol driver --cmake-dir` (pass it as idcontrol_driver_DIR or in CMAKE_PREFIX_PATH).
# Defines the INTERFACE target idcontrol::driver: the include directory, C++17, libzmq through cppzmq, msgpack-cxx.
include(CMakeFindDependencyMacro)
find_dependency(cppzmq)
find_package(msgpack-cxx CONFIG QUIET)   # msgpack-cxx >= 6
if(TARGET msgpack-cxx)
  set(_idcontrol_msgpack msgpack-cxx)
else()
  find_dependency(msgpack)               # msgpack-cxx 4 (Debian 12: libmsgpack-cxx-dev)
  set(_idcontrol_msgpack msgpackc-cxx)
endif()
if(NOT TARGET idcontrol::driver)
  add_library(idcontrol::driver INTERFACE IMPORTED)
  get_filename_component(_idcontrol_driver_include "${CMAKE_CURRENT_LIST_DIR}/../include" ABSOLUTE)
  set_target_properties(idcontrol::driver PROPERTIES
    INTERFACE_INCLUDE_DIRECTORIES "${_idcontrol_driver_include}"
    INTERFACE_COMPILE_FEATURES cxx_std_17
    INTERFACE_LINK_LIBRARIES "cppzmq;${_idcontrol_msgpack}")
endif()
set(idcontrol_driver_FOUND TRUE)
