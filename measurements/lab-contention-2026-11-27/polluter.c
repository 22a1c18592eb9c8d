/* A neighbour process: sleeps, then for a burst touches a working set of F bytes (one write per cache line). */
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
int main(int argc,char**argv){
  long bytes=atol(argv[1]); double burst=atof(argv[2])*1e-6; long sleep_us=atol(argv[3]);
  volatile char*m=malloc(bytes); long i=0;
  for(long k=0;k<bytes;k+=64)m[k]=1;
  for(;;){usleep(sleep_us); double end=now()+burst;
    while(now()<end){for(int j=0;j<64;j++){m[i]++; i+=64; if(i>=bytes)i=0;}}}
}
