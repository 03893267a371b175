#!/usr/bin/env python3
# fold.py FILE.folded FUNC...: inclusive samples of each FUNC (counted once per stack)
# fold.py FILE.folded --under A B : samples with A in the stack, B below A
# fold.py FILE.folded --kids A [N]: the children of A (inclusive), top N
import sys,collections
f=sys.argv[1]; a=sys.argv[2:]
stacks=[]
for l in open(f):
    s,_,n=l.rstrip().rpartition(' ')
    stacks.append((s.split(';'),int(n)))
tot=sum(n for _,n in stacks)
if a and a[0]=='--kids':
    A=a[1]; N=int(a[2]) if len(a)>2 else 20
    c=collections.Counter(); t=0; self_=0
    for fr,n in stacks:
        if A in fr:
            i=fr.index(A); t+=n
            if i+1<len(fr): c[fr[i+1]]+=n
            else: self_+=n
    print(f'{A}: {t} (self {self_}) of {tot}')
    for k,v in c.most_common(N): print(f'  {v:6d} {k}')
elif a and a[0]=='--under':
    A,B=a[1],a[2]
    t=sum(n for fr,n in stacks if A in fr and B in fr[fr.index(A):])
    print(f'{B} under {A}: {t}')
else:
    print('total',tot)
    for x in a:
        print(f'{sum(n for fr,n in stacks if x in fr):7d} {x}')
