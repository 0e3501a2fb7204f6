// expect: must be compiled by a CUDA compiler
#include <replayssm/replayssm.cuh>
