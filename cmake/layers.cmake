# Include paths per target, so the layering rules of docs/architecture.md fail to compile when
# broken. Every project include is written from the repository root ("folder/file.h"); instead of
# putting the root on every target's include path, each folder gets a view directory holding one
# link, build/layers/<folder>/<folder> -> <source>/<folder>, and the target that owns the folder
# exports that view. A target sees a folder only through a library it links (PUBLIC links pass
# the view on), so an include of a folder whose library is not linked is an error.

# yoco_layer(TARGET FOLDER...): TARGET's sources and its dependents may include FOLDER/...
function(yoco_layer target)
  foreach(folder ${ARGN})
    set(view ${CMAKE_BINARY_DIR}/layers/${folder})
    if(NOT EXISTS ${view}/${folder})
      file(MAKE_DIRECTORY ${view})
      file(CREATE_LINK ${CMAKE_SOURCE_DIR}/${folder} ${view}/${folder} SYMBOLIC)
    endif()
    get_target_property(_type ${target} TYPE)
    if(_type STREQUAL "EXECUTABLE")
      target_include_directories(${target} PRIVATE ${view})
    else()
      target_include_directories(${target} PUBLIC ${view})
    endif()
  endforeach()
endfunction()
