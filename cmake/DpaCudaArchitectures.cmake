# SPDX-License-Identifier: Apache-2.0
# CMAKE_CUDA_ARCHITECTURES for dpa's CUDA kernels, decided before enable_language(CUDA).
#
# Unset: every architecture from sm_75 (Turing) to sm_120 (Blackwell workstation) that the local
# nvcc can build, as machine code (-real), plus the PTX of the highest so that later GPUs JIT it.
# Set (by hand, by the CUDAARCHS environment variable, or by python/setup.py from the
# architectures of the torch it builds against): kept, minus the entries this nvcc cannot build,
# which are dropped with a warning (a torch built for sm_50 meets a CUDA 13 nvcc that starts at
# sm_75). The extension embeds the final list for its run-time check (python/csrc/cuda_arch_check.cpp).

# Machine code runs on GPUs of the same major and a minor at least its own (sm_80 on 8.0-8.9,
# sm_86 on 8.6-8.9, sm_100 on 10.x, sm_120 on 12.x), so these cover 7.5 to 12.x; 110 is Thor
# (CUDA 13 numbering).
set(DPA_CUDA_DEFAULT_CANDIDATES 75 80 86 90 100 110 120)

# The numeric part of an architecture entry: "90a-real" -> 90.
function(_dpa_cuda_arch_number entry out)
  string(REGEX MATCH "^[0-9]+" number "${entry}")
  set(${out} "${number}" PARENT_SCOPE)
endfunction()

# The architectures `compiler` can build (numbers), from nvcc --list-gpu-arch (CUDA 11.1 and
# later); empty when it cannot say.
function(_dpa_nvcc_architectures compiler out)
  execute_process(COMMAND "${compiler}" --list-gpu-arch OUTPUT_VARIABLE listed
                  RESULT_VARIABLE status ERROR_QUIET)
  set(numbers "")
  if(status EQUAL 0)
    string(REGEX MATCHALL "compute_[0-9]+" computes "${listed}")
    foreach(compute IN LISTS computes)
      string(REPLACE "compute_" "" number "${compute}")
      list(APPEND numbers ${number})
    endforeach()
  endif()
  set(${out} "${numbers}" PARENT_SCOPE)
endfunction()

function(dpa_cuda_architectures compiler)
  _dpa_nvcc_architectures("${compiler}" supported)
  if(NOT supported)
    message(STATUS "dpa: ${compiler} does not list its architectures (--list-gpu-arch); "
                   "CMAKE_CUDA_ARCHITECTURES is taken as it is")
  endif()
  if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES AND NOT DEFINED ENV{CUDAARCHS})
    set(chosen "")
    foreach(candidate IN LISTS DPA_CUDA_DEFAULT_CANDIDATES)
      if(NOT supported OR candidate IN_LIST supported)
        list(APPEND chosen ${candidate})
      endif()
    endforeach()
    if(NOT supported)
      set(chosen 75 80 86 90)  # what every nvcc from CUDA 11.8 on builds
    endif()
    list(POP_BACK chosen highest)
    list(TRANSFORM chosen APPEND "-real")
    list(APPEND chosen ${highest})  # machine code and PTX
    set(CMAKE_CUDA_ARCHITECTURES "${chosen}" CACHE STRING
        "CUDA architectures of dpa's kernels (default: sm_75..sm_120 as nvcc supports, PTX of the highest)")
    message(STATUS "dpa: CUDA architectures ${chosen} (CMAKE_CUDA_ARCHITECTURES overrides)")
    return()
  endif()
  if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
    set(CMAKE_CUDA_ARCHITECTURES "$ENV{CUDAARCHS}")
  endif()
  set(kept "")
  set(dropped "")
  foreach(entry IN LISTS CMAKE_CUDA_ARCHITECTURES)
    _dpa_cuda_arch_number("${entry}" number)
    # all, all-major, native: CMake's own keywords, nvcc decides.
    if(NOT supported OR number STREQUAL "" OR number IN_LIST supported)
      list(APPEND kept ${entry})
    else()
      list(APPEND dropped ${entry})
    endif()
  endforeach()
  if(dropped)
    if(NOT kept)
      message(FATAL_ERROR "dpa: CMAKE_CUDA_ARCHITECTURES=${CMAKE_CUDA_ARCHITECTURES}: ${compiler} builds "
                          "none of them (it builds ${supported}); pass architectures it supports, "
                          "or -DDPA_CUDA=OFF")
    endif()
    message(WARNING "dpa: CMAKE_CUDA_ARCHITECTURES: ${dropped} dropped, ${compiler} cannot build them "
                    "(it builds ${supported}); building for ${kept}")
  endif()
  set(CMAKE_CUDA_ARCHITECTURES "${kept}" CACHE STRING "CUDA architectures of dpa's kernels" FORCE)
  message(STATUS "dpa: CUDA architectures ${kept}")
endfunction()
