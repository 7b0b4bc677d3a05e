/*
 * zephon.h - the umbrella header of libzephon (the core library; the MPI
 * layer has its own header, zephon/mpi.h, the only one including <mpi.h>).
 */
#ifndef ZEPHON_H
#define ZEPHON_H

#include "zephon/common.h"
#include "zephon/certificate.h"
#include "zephon/dataset.h"
#include "zephon/observe.h"
#include "zephon/pipeline.h"
#include "zephon/preprocess.h"
#include "zephon/state.h"
#include "zephon/storage.h"
#include "zephon/tokenizer.h"
#include "zephon/watchdog.h"
#include "zephon/worksource.h"

#endif
