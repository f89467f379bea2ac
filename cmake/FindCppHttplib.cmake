# SPDX-License-Identifier: Apache-2.0
# cpp-httplib, for dpa-switch's metrics endpoint (optional: without it --metrics reports that it
# is missing). Debian's libcpp-httplib-dev ships a compiled library with a pkg-config file;
# upstream's install a CMake package (httplib::httplib). Defines CppHttplib_FOUND,
# CppHttplib_VERSION and the global target CppHttplib::CppHttplib.
find_package(httplib CONFIG QUIET)
if(httplib_FOUND)
  add_library(CppHttplib::CppHttplib INTERFACE IMPORTED GLOBAL)
  target_link_libraries(CppHttplib::CppHttplib INTERFACE httplib::httplib)
  set(CppHttplib_VERSION ${httplib_VERSION})
else()
  find_package(PkgConfig QUIET)
  if(PkgConfig_FOUND)
    pkg_check_modules(CPP_HTTPLIB QUIET IMPORTED_TARGET GLOBAL cpp-httplib)
  endif()
  if(CPP_HTTPLIB_FOUND)
    add_library(CppHttplib::CppHttplib ALIAS PkgConfig::CPP_HTTPLIB)
    set(CppHttplib_VERSION ${CPP_HTTPLIB_VERSION})
  endif()
endif()
include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(CppHttplib REQUIRED_VARS CppHttplib_VERSION VERSION_VAR CppHttplib_VERSION)
