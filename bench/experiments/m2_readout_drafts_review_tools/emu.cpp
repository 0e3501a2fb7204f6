// Host emulation: single-chunk weights (setup patch) vs decay_weights (HEAD), bitwise;
// warp_out coverage; buffered_x vs staged_rows element maps; grid mapping.
#include <cstdio>
#include <cstdint>
#include <cstring>
#include <cmath>
#include <random>
#include <vector>
static uint32_t bits(float f){uint32_t u;memcpy(&u,&f,4);return u;}
int main(){
  std::mt19937_64 rng(1);
  long bad=0, tot=0;
  for(int iter=0; iter<200000; ++iter){
    int L = 2 + rng()%31;   // <= 32
    int MaxDraft = 1 + rng()%std::min(32, L);
    int n = rng()%(L+1);
    int K = 1 + rng()%L;
    bool fold = n >= K;
    int nd = rng()% (MaxDraft+1); if (nd > L-n) nd = L-n; if(nd<=0) continue;
    int base = fold?0:n; int m = base+nd;
    float A = -std::exp(float(rng()%1000)/200.f - 4.f);
    if (rng()%50==0) A = -0.f;
    std::vector<float> dt(64), wd(32*64);
    for (auto& v: dt) { v = float(rng()%1000)/300.f; if(rng()%20==0) v = 0.f; if (rng()%40==0) v=-0.f;}
    for (auto& v: wd) v = float(int(rng()%2001)-1000)/300.f;
    std::vector<uint32_t> path(nd);
    for(int d=0; d<nd; ++d){ int par = (rng()%2)? int(rng()%(d+1))-1 : d-1; path[d] = (1u<<d) | (par>=0? path[par]:0u); }
    for(int d=0; d<nd; ++d){
      // HEAD decay_weights
      float wH[32]={0}, decH; float carry=0.f;
      auto on=[&](int j){return j<base || ((path[d]>>(j-base))&1u);};
      for(int b0=((m-1)/32)*32; b0>=0; b0-=32){
        float la[32], incl[32];
        for(int lane=0;lane<32;++lane){int j=b0+lane; la[lane]=(j<m&&on(j))?A*dt[j]:0.f; incl[lane]=la[lane];}
        for(int off=1;off<32;off<<=1){float o[32]; for(int l=0;l<32;++l) o[l]=incl[(l+off)&31]; for(int l=0;l<32;++l) if(l+off<32) incl[l]+=o[l];}
        for(int lane=0;lane<32;++lane){int j=b0+lane; if(j<m){ float bse = on(j)? wd[d*32+j]*dt[j]:0.f; wH[j]=bse*expf(incl[lane]-la[lane]+carry);} }
        carry += incl[0];
      }
      decH = expf(carry);
      // setup single chunk
      float wS[32]={0}, decS;
      { float la[32], incl[32], dts[32]; bool onl[32];
        for(int lane=0;lane<32;++lane){ onl[lane]= lane<m && (lane<base || ((path[d]>>(lane-base))&1u)); dts[lane]=onl[lane]?dt[lane]:0.f; la[lane]=onl[lane]?A*dts[lane]:0.f; incl[lane]=la[lane]; }
        for(int off=1;off<32;off<<=1){float o[32]; for(int l=0;l<32;++l) o[l]=incl[(l+off)&31]; for(int l=0;l<32;++l) if(l+off<32) incl[l]+=o[l];}
        for(int lane=0;lane<32;++lane){ float bj = onl[lane]? wd[d*32+lane]*dts[lane]:0.f; if(lane<m) wS[lane]=bj*expf(incl[lane]-la[lane]); }
        decS = expf(incl[0]); }
      ++tot;
      bool ok = bits(decH)==bits(decS);
      for(int j=0;j<m;++j) ok = ok && bits(wH[j])==bits(wS[j]);
      if(!ok){ if(bad<5) printf("mismatch L%d m%d base%d d%d\n",L,m,base,d); ++bad; }
    }
  }
  printf("weights: %ld drafts, %ld mismatches\n", tot, bad);
  // warp_out coverage
  for(int MD=3; MD<=4; ++MD) for(int nd=0; nd<=MD; ++nd){
    int cnt[4][64]={{0}};
    for(int tid=0; tid<128; ++tid){int warp=tid>>5, lane=tid&31; if(warp<nd){cnt[warp][2*lane]++; cnt[warp][2*lane+1]++;}}
    for(int d=0; d<4; ++d) for(int r=0;r<64;++r) if(cnt[d][r]!=(d<nd?1:0)) printf("coverage bad MD%d nd%d d%d r%d\n",MD,nd,d,r);
  }
  // buffered_x vs staged_rows: (row, col-chunk) map for vec 8 (16-bit) and 4 (fp32), NB up to 63, P 64
  for(int vec: {4,8}) for(int NB=1; NB<64; ++NB){ int cpr=64/vec, NT=128, iters=(NB*cpr+NT-1)/NT;
    for(int rows=0; rows<=NB; ++rows) for(int tid=0; tid<NT; ++tid) for(int it=0; it<iters; ++it){
      int c = tid+it*NT; unsigned cu = unsigned(tid)+unsigned(it*NT);
      bool a = c < rows*cpr, b = cu < unsigned(rows*cpr);
      if(a!=b || (a && (c/cpr != int(cu/cpr) || (c%cpr)*vec != int(cu%cpr)*vec))) printf("bx bad\n"); } }
  // grid map
  for(int H=1; H<=256; ++H) for(int G=1; G<=H; ++G) if(H%G==0){ int X=H/G;
    std::vector<int> seen(H,0);
    for(int y=0;y<G;++y) for(int x=0;x<X;++x){ unsigned h=y*X+x; if(h>=unsigned(H)||int(h/(H/G))!=y) printf("grid bad\n"); seen[h]++; }
    for(int h=0;h<H;++h) if(seen[h]!=1) printf("grid cover bad\n"); }
  printf("done\n");
}
