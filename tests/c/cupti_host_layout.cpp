// cupti_host_layout.cpp: checks engine/cupti_host.h (C restatements of the
// Profiler Host API structures) against the toolkit's cupti_profiler_host.h,
// which only a C++ compiler can read.  Not built by CMake (the project is
// C11); run it when the toolkit changes:
//   g++ -std=c++17 -fsyntax-only -I engine -I /usr/local/cuda/include \
//       tests/c/cupti_host_layout.cpp
#include <cupti_profiler_host.h>

#include "cupti_host.h"

#define SAME(mine, theirs, field)                                                        \
    static_assert(offsetof(mine, field) == offsetof(theirs, field), #mine "." #field);  \
    static_assert(sizeof(((mine *)0)->field) == sizeof(((theirs *)0)->field), #mine "." #field)
#define SIZE(mine, theirs, last)                                                         \
    static_assert(KH_SZ(mine, last) == theirs##_STRUCT_SIZE, #mine " size")

SAME(kh_host_init, CUpti_Profiler_Host_Initialize_Params, profilerType);
SAME(kh_host_init, CUpti_Profiler_Host_Initialize_Params, pChipName);
SAME(kh_host_init, CUpti_Profiler_Host_Initialize_Params, pCounterAvailabilityImage);
SAME(kh_host_init, CUpti_Profiler_Host_Initialize_Params, pHostObject);
SIZE(kh_host_init, CUpti_Profiler_Host_Initialize_Params, pHostObject);
static_assert((int)KH_CUPTI_PROFILER_TYPE_RANGE_PROFILER == (int)CUPTI_PROFILER_TYPE_RANGE_PROFILER,
              "profiler type");
SAME(kh_host_deinit, CUpti_Profiler_Host_Deinitialize_Params, pHostObject);
SIZE(kh_host_deinit, CUpti_Profiler_Host_Deinitialize_Params, pHostObject);
SAME(kh_host_metric_props, CUpti_Profiler_Host_GetMetricProperties_Params, pMetricName);
SAME(kh_host_metric_props, CUpti_Profiler_Host_GetMetricProperties_Params, pDimUnit);
SAME(kh_host_metric_props, CUpti_Profiler_Host_GetMetricProperties_Params, metricType);
SIZE(kh_host_metric_props, CUpti_Profiler_Host_GetMetricProperties_Params, metricType);
SAME(kh_host_range_name, CUpti_Profiler_Host_GetRangeName_Params, rangeIndex);
SAME(kh_host_range_name, CUpti_Profiler_Host_GetRangeName_Params, delimiter);
SAME(kh_host_range_name, CUpti_Profiler_Host_GetRangeName_Params, pRangeName);
SIZE(kh_host_range_name, CUpti_Profiler_Host_GetRangeName_Params, pRangeName);
SAME(kh_host_evaluate, CUpti_Profiler_Host_EvaluateToGpuValues_Params, pCounterDataImage);
SAME(kh_host_evaluate, CUpti_Profiler_Host_EvaluateToGpuValues_Params, rangeIndex);
SAME(kh_host_evaluate, CUpti_Profiler_Host_EvaluateToGpuValues_Params, ppMetricNames);
SAME(kh_host_evaluate, CUpti_Profiler_Host_EvaluateToGpuValues_Params, numMetrics);
SAME(kh_host_evaluate, CUpti_Profiler_Host_EvaluateToGpuValues_Params, pMetricValues);
SIZE(kh_host_evaluate, CUpti_Profiler_Host_EvaluateToGpuValues_Params, pMetricValues);
SAME(kh_host_add_metrics, CUpti_Profiler_Host_ConfigAddMetrics_Params, ppMetricNames);
SAME(kh_host_add_metrics, CUpti_Profiler_Host_ConfigAddMetrics_Params, numMetrics);
SIZE(kh_host_add_metrics, CUpti_Profiler_Host_ConfigAddMetrics_Params, numMetrics);
SAME(kh_host_config_size, CUpti_Profiler_Host_GetConfigImageSize_Params, configImageSize);
SIZE(kh_host_config_size, CUpti_Profiler_Host_GetConfigImageSize_Params, configImageSize);
SAME(kh_host_config_image, CUpti_Profiler_Host_GetConfigImage_Params, configImageSize);
SAME(kh_host_config_image, CUpti_Profiler_Host_GetConfigImage_Params, pConfigImage);
SIZE(kh_host_config_image, CUpti_Profiler_Host_GetConfigImage_Params, pConfigImage);
SAME(kh_host_num_passes, CUpti_Profiler_Host_GetNumOfPasses_Params, configImageSize);
SAME(kh_host_num_passes, CUpti_Profiler_Host_GetNumOfPasses_Params, pConfigImage);
SAME(kh_host_num_passes, CUpti_Profiler_Host_GetNumOfPasses_Params, numOfPasses);
SIZE(kh_host_num_passes, CUpti_Profiler_Host_GetNumOfPasses_Params, numOfPasses);
