! common_block.f90 - the NASA Columbia (Itanium) COMMON block case.
!
! COMMON /data/ starts with a 4-byte INTEGER, so the REAL*4 array r2 that
! follows it is only 4-byte aligned: r2 sits at 4 mod 8 whenever the block is
! 8-aligned (gfortran aligns it to at least 8, and the program checks it).
! Fortran passes r2 by reference to subroutines compiled separately
! (common_block_sub.f90) that declare the dummy argument REAL(KIND=8): every
! element of that view straddles an 8-byte boundary, so each REAL*8 load and
! store is misaligned.  Legal-looking in F77 style, fatal on strict CPUs.
!
! Faults with the default argument (len=100), all 8-byte, all in
! common_block_sub.f90: fill 100 writes, scale 100 reads + 100 writes,
! dsum 100 reads.
!
! Usage: common_block [len]    (len <= 499 REAL*8 elements)
program common_block
  implicit none
  integer, parameter :: n = 1000
  integer :: i1
  real :: r2(n)
  common /data/ i1, r2
  integer :: len
  character(len=32) :: arg
  real(kind=8), external :: dsum

  len = 100
  if (command_argument_count() >= 1) then
    call get_command_argument(1, arg)
    read (arg, *) len
  end if
  if (len < 0 .or. 2 * len > n) stop 2

  i1 = len
  ! loc() is a GNU extension: the address a debugger will report for x(1).
  print '(a,i0,a,i0)', 'common_block: loc(r2) mod 8 = ', mod(loc(r2), 8_8), &
       '  loc(i1) mod 8 = ', mod(loc(i1), 8_8)
  if (mod(loc(r2), 8_8) == 0) then
    print '(a)', 'common_block: r2 is 8-aligned, the example would not fault'
    stop 1
  end if

  call fill(r2, len)
  call scale(r2, len)
  print '(a,i0,a,f0.1)', 'common_block: len=', len, ' sum=', dsum(r2, len)
end program common_block
