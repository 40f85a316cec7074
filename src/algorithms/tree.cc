// Tree algorithms: reduce up a tree, broadcast down it, pipelined slice by slice. See tree.h
// for the shape of the trees; they are built over ring positions (CollectiveArgs::order), so
// subtrees are neighbours in the machine.
#include "algorithms/tree.h"

#include "algorithms/algorithm.h"
#include "algorithms/partition.h"

namespace loom {

TreeNode binaryTree(int n, int v) {
  TreeNode node;
  int bit = 1;
  while (bit < n && (v & bit) == 0) bit <<= 1;
  if (v == 0) {
    // bit is now the smallest power of two >= n: the root's one child is half of it.
    if (n > 1) node.children[1] = bit >> 1;
    return node;
  }
  node.parent = (v ^ bit) | (bit << 1);
  if (node.parent >= n) node.parent = v ^ bit;
  int low = bit >> 1;
  if (low == 0) return node;
  node.children[0] = v - low;
  while (low > 0 && v + low >= n) low >>= 1;
  node.children[1] = low > 0 ? v + low : -1;
  return node;
}

namespace {

// Renumbers a node of a tree over virtual ranks through `toReal`.
template <typename Map>
TreeNode mapped(TreeNode node, Map toReal) {
  if (node.parent >= 0) node.parent = toReal(node.parent);
  for (int& c : node.children) {
    if (c >= 0) c = toReal(c);
  }
  return node;
}


// A tree node over positions, with its neighbours named by rank.
TreeNode inRanks(const CollectiveArgs& a, TreeNode node) {
  return mapped(node, [&](int position) { return a.rankAt(position); });
}

}  // namespace

TreeNode doubleTree(int n, int r, int t) {
  if (t == 0) return binaryTree(n, r);
  if (n % 2 == 1) {
    return mapped(binaryTree(n, mod(r - 1, n)), [n](int v) { return mod(v + 1, n); });
  }
  return mapped(binaryTree(n, n - 1 - r), [n](int v) { return n - 1 - v; });
}

TreeNode rootedTree(int n, int r, int root) {
  return mapped(binaryTree(n, mod(r - root, n)), [n, root](int v) { return mod(v + root, n); });
}

TreeNode hostDoubleTree(const std::vector<int>& hostStarts, int n, int p, int t) {
  const int hosts = static_cast<int>(hostStarts.size());
  int h = hosts - 1;
  while (hostStarts[static_cast<size_t>(h)] > p) --h;
  auto first = [&](int host) { return hostStarts[static_cast<size_t>(host)]; };
  auto last = [&](int host) { return (host + 1 < hosts ? first(host + 1) : n) - 1; };
  // Tree 0 chains each host forwards from its first position, tree 1 backwards from its last.
  auto head = [&](int host) { return t == 0 ? first(host) : last(host); };
  const int step = t == 0 ? 1 : -1;
  TreeNode node;
  if (p != head(h)) {
    node.parent = p - step;
    if (p != (t == 0 ? last(h) : first(h))) node.children[0] = p + step;
    return node;
  }
  if (first(h) != last(h)) node.children[0] = p + step;
  TreeNode between = doubleTree(hosts, h, t);
  if (between.parent >= 0) node.parent = head(between.parent);
  for (int i = 0, c = 1; i < 3; ++i) {
    if (between.children[i] >= 0) node.children[c++] = head(between.children[i]);
  }
  return node;
}

namespace {

// The child whose bytes a node reduces first, straight from its own input (reduceUp takes
// its children in this order); -1 for a leaf.
int firstChildOf(const TreeNode& node) {
  for (int child : node.children) {
    if (child >= 0) return child;
  }
  return -1;
}

// Whether the rank at position p is its parent's first child in `shape` (a position's node,
// neighbours as positions): the parent reduces that child's bytes as they arrive, through
// the FIFO, where it stages a later child's until the first is reduced (reduceUp).
template <class Shape>
bool firstChild(Shape shape, int p) {
  const int parent = shape(p).parent;
  return parent >= 0 && firstChildOf(shape(parent)) == p;
}

// Up the tree for one slice: reduce what the children send into `acc` (starting from this
// rank's own `own`), then pass it to the parent. Returns the step after which `acc` holds
// the slice's result for this subtree (kNone when there are no children: then it is `own`).
// `upViaFifo`: this rank is its parent's first child (Step::viaFifo).
int reduceUp(Plan& plan, const TreeNode& node, int channel, const void* own, void* acc, size_t bytes,
             bool finalizeAtRoot, bool upViaFifo) {
  int last = Step::kNone;
  int childCount = (node.children[0] >= 0) + (node.children[1] >= 0) + (node.children[2] >= 0);
  int seen = 0;
  for (int child : node.children) {
    if (child < 0) continue;
    ++seen;
    const bool first = child == firstChildOf(node);
    Step st = linkStep(Step::Kind::kRecvReduce, child, channel, first ? own : acc, acc, bytes);
    // The second child's bytes may arrive early; only its write waits for the first.
    st.writeAfter = last;
    st.finalize = finalizeAtRoot && node.parent < 0 && seen == childCount;
    last = plan.add(st);
  }
  if (node.parent >= 0) {
    Step st = linkStep(Step::Kind::kSend, node.parent, channel, last == Step::kNone ? own : acc, nullptr, bytes);
    st.after = last;
    st.viaFifo = upViaFifo;
    plan.add(st);
  }
  return last;
}

// Down the tree for one slice: take the result from the parent (unless root), then pass it
// to the children. `ready` is the step after which the root's `data` holds the result.
// `viaFifo`: the parent's buffer is one it reduces into again (Step::viaFifo).
void sendDown(Plan& plan, const TreeNode& node, int channel, void* data, size_t bytes, int ready, bool viaFifo) {
  if (node.parent >= 0) {
    Step st = linkStep(Step::Kind::kRecv, node.parent, channel, nullptr, data, bytes);
    st.viaFifo = viaFifo;
    ready = plan.add(st);
  }
  for (int child : node.children) {
    if (child < 0) continue;
    Step st = linkStep(Step::Kind::kSend, child, channel, data, nullptr, bytes);
    st.after = ready;
    st.viaFifo = viaFifo;  // the child's receive from here is marked alike
    plan.add(st);
  }
}

}  // namespace

std::string describeAllReduceTrees(const RingOrder* order, int n) {
  const bool hosts = order && order->hostStarts().size() > 1;
  auto rankAt = [&](int p) { return order ? order->rankAt(p) : p; };
  std::string text;
  for (int t = 0; t < 2; ++t) {
    text += t == 0 ? "tree 0 (rank:parent):" : "; tree 1 (rank:parent):";
    for (int p = 0; p < n; ++p) {
      const TreeNode node = hosts ? hostDoubleTree(order->hostStarts(), n, p, t) : doubleTree(n, p, t);
      text += " " + std::to_string(rankAt(p)) + ":" + (node.parent < 0 ? "root" : std::to_string(rankAt(node.parent)));
    }
  }
  return text;
}

// Half the buffer goes up and down tree 0, the other half tree 1; each result is computed
// once, at its tree's root, so every rank ends with the same bits.
void treeAllReduce(const CollectiveArgs& a, Plan& plan) {
  const int n = a.nranks;
  const bool avg = a.info.op == loomAvg;
  const size_t se = a.sliceElems(), es = a.elemSize();
  if (n == 1) return copyAlone(a, plan, a.info.count);
  const std::vector<int>* hosts = a.order && a.order->hostStarts().size() > 1 ? &a.order->hostStarts() : nullptr;
  auto shape = [&](int t) {
    return [&, t](int p) { return hosts ? hostDoubleTree(*hosts, n, p, t) : doubleTree(n, p, t); };
  };
  const TreeNode nodes[2] = {inRanks(a, shape(0)(a.position())), inRanks(a, shape(1)(a.position()))};
  const bool upViaFifo[2] = {firstChild(shape(0), a.position()), firstChild(shape(1), a.position())};
  const Range halves[2] = {part(a.info.count, 2, 0), part(a.info.count, 2, 1)};
  const size_t slices = sliceCount(halves[0], se);
  for (size_t j = 0; j < slices; ++j) {
    for (int t = 0; t < 2; ++t) {
      Range s = slice(halves[t], se, j);
      if (s.size() == 0) continue;
      size_t bytes = s.size() * es;
      int channel = t % a.channels;
      int done = reduceUp(plan, nodes[t], channel, a.sendAt(s.begin), a.recvAt(s.begin), bytes, avg, upViaFifo[t]);
      sendDown(plan, nodes[t], channel, a.recvAt(s.begin), bytes, done, true);
    }
  }
}

void treeBroadcast(const CollectiveArgs& a, Plan& plan) {
  const TreeNode node = inRanks(a, rootedTree(a.nranks, a.position(), a.positionOf(a.info.root)));
  const bool isRoot = a.rank == a.info.root;
  const size_t es = a.elemSize();
  forEachSlice(a.info.count, a.channels, a.sliceElems(), [&](int c, const Range& s) {
    size_t bytes = s.size() * es;
    if (isRoot && a.send != a.recv) plan.add(copyStep(a.sendAt(s.begin), a.recvAt(s.begin), bytes, false));
    // The root sends straight from sendbuff; the others forward what they received.
    void* data = isRoot ? const_cast<char*>(a.sendAt(s.begin)) : a.recvAt(s.begin);
    sendDown(plan, node, c, data, bytes, Step::kNone, false);
  });
}

// Inner ranks other than the root reduce into scratch: a non-root's recvbuff is not touched.
void treeReduce(const CollectiveArgs& a, Plan& plan) {
  auto shape = [&](int p) { return rootedTree(a.nranks, p, a.positionOf(a.info.root)); };
  const TreeNode node = inRanks(a, shape(a.position()));
  const bool upViaFifo = firstChild(shape, a.position());
  const bool isRoot = a.rank == a.info.root, avg = a.info.op == loomAvg;
  const size_t se = a.sliceElems(), es = a.elemSize();
  if (a.nranks == 1) return copyAlone(a, plan, a.info.count);
  const bool inner = !node.isLeaf();
  char* partial = (!isRoot && inner) ? plan.scratch(a.info.count * es) : nullptr;
  forEachSlice(a.info.count, a.channels, se, [&](int c, const Range& s) {
    void* acc = isRoot ? a.recvAt(s.begin) : (partial ? partial + s.begin * es : nullptr);
    reduceUp(plan, node, c, a.sendAt(s.begin), acc, s.size() * es, avg, upViaFifo);
  });
}

}  // namespace loom
