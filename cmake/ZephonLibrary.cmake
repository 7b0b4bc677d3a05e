# cmake/ZephonLibrary.cmake - one compilation, two libraries.
#
#   zp_split_library(<name> [OBJECTS <objlib>...] [SHARED_OBJECTS <objlib>...]
#                    [MAP <lib> <lib_static>]...)
#
# Called once <name> (a library target: libzephon, libzephon_mpi) has all its
# sources, include directories, definitions, options and link libraries. It
#
#  - moves the sources into an OBJECT library <name>_objects, compiled once,
#    with -fvisibility=hidden and ZP_BUILDING_LIBRARY defined, so that only
#    the functions declared ZP_API (include/zephon/common.h) are exported;
#  - makes <name> (shared or static after BUILD_SHARED_LIBS: the installed
#    library) from those objects;
#  - makes <name>_static, a static library of the same objects for the
#    programs of the project that call internal zpi_ functions (the zephon
#    command, tests, benchmarks): they link it instead of reaching into the
#    shared library. Its include directories are public (src/ included) and
#    it links every dependency of <name>, with each MAP <lib> replaced by
#    <lib_static> (libzephon_mpi's static variant links zephon_static).
#  - adds the objects of each OBJECTS library to both, and those of each
#    SHARED_OBJECTS library to <name> when it is a shared library (libzephon_mpi
#    carries its own hidden copy of the small helpers, which libzephon does
#    not export; its static variant takes them from zephon_static).
#
# Shared libraries are linked with --no-undefined (but under sanitizers,
# whose runtime lives in the executable): a hidden symbol used across
# libraries fails at link time instead of at load time.
#
# Hidden symbols still link statically: <name>_static exports nothing of its
# own, it only supplies objects to the programs linking it.
function(zp_split_library name)
  cmake_parse_arguments(Z "" "" "MAP;OBJECTS;SHARED_OBJECTS" ${ARGN})
  get_target_property(srcs ${name} SOURCES)
  get_target_property(srcdir ${name} SOURCE_DIR)
  set(abs_srcs)
  set(lang C)
  foreach(s ${srcs})
    if(NOT IS_ABSOLUTE "${s}")
      set(s ${srcdir}/${s})
    endif()
    list(APPEND abs_srcs ${s})
    if(s MATCHES "\\.(cpp|cc|cxx)$")
      set(lang CXX)
    endif()
  endforeach()

  set(obj ${name}_objects)
  add_library(${obj} OBJECT ${abs_srcs})
  set_target_properties(${obj} PROPERTIES
    C_VISIBILITY_PRESET hidden CXX_VISIBILITY_PRESET hidden VISIBILITY_INLINES_HIDDEN ON
    POSITION_INDEPENDENT_CODE ON)
  foreach(prop COMPILE_OPTIONS COMPILE_DEFINITIONS INCLUDE_DIRECTORIES COMPILE_FEATURES)
    get_target_property(v ${name} ${prop})
    if(v)
      set_property(TARGET ${obj} PROPERTY ${prop} "${v}")
    endif()
  endforeach()
  target_compile_definitions(${obj} PRIVATE ZP_BUILDING_LIBRARY)
  get_target_property(libs ${name} LINK_LIBRARIES)
  if(NOT libs)
    set(libs)
  endif()
  # Usage requirements (include directories, flags) of the dependencies.
  target_link_libraries(${obj} PRIVATE ${libs})

  # The installed library: the objects, linked with the dependencies as before.
  set(objs $<TARGET_OBJECTS:${obj}>)
  foreach(o ${Z_OBJECTS})
    list(APPEND objs $<TARGET_OBJECTS:${o}>)
  endforeach()
  set(shared_objs ${objs})
  get_target_property(type ${name} TYPE)
  if(type STREQUAL "SHARED_LIBRARY")
    foreach(o ${Z_SHARED_OBJECTS})
      list(APPEND shared_objs $<TARGET_OBJECTS:${o}>)
    endforeach()
    if(NOT ZEPHON_SANITIZE)
      target_link_options(${name} PRIVATE LINKER:--no-undefined)
    endif()
  endif()
  set_property(TARGET ${name} PROPERTY SOURCES ${shared_objs})
  set_target_properties(${name} PROPERTIES LINKER_LANGUAGE ${lang})

  # The static variant for the project's own programs.
  set(slibs)
  foreach(l ${libs})
    list(FIND Z_MAP "${l}" i)
    if(i GREATER_EQUAL 0)
      math(EXPR j "${i} + 1")
      list(GET Z_MAP ${j} l)
    endif()
    list(APPEND slibs ${l})
  endforeach()
  set(st ${name}_static)
  add_library(${st} STATIC ${objs})
  set_target_properties(${st} PROPERTIES LINKER_LANGUAGE ${lang} OUTPUT_NAME ${name}_internal)
  get_target_property(incs ${obj} INCLUDE_DIRECTORIES)
  target_include_directories(${st} PUBLIC ${incs})
  target_link_libraries(${st} PUBLIC ${slibs})
endfunction()
